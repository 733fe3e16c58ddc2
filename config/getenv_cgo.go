//go:build cgo

package config

/*
#include <stdlib.h>
*/
import "C"

import "unsafe"

// lookupEnv reads name from the C environment (the one putenv and Python's os.environ change).
func lookupEnv(name string) (string, bool) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.getenv(cs)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}
