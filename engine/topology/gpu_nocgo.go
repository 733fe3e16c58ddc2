//go:build !cgo || !linux

package topology

// gpus: without cgo NVML cannot be loaded, so no GPUs are reported.
func gpus() []GPU { return nil }
