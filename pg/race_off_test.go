//go:build !race

package pg_test

const raceDetector = false
