//go:build race

package pg_test

// raceDetector: the race detector cannot see happens-before edges that cross processes. In the
// ring algorithms a rank's sender goroutine reads a chunk, writes it into the peer, and the
// peer's reply (which it could only send after receiving that chunk) lands in the same memory
// through the progress goroutine: ordered across the two processes, invisible to the detector.
const raceDetector = true
