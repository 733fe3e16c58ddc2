package futex

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWakeReleasesWaiter(t *testing.T) {
	var w uint32
	done := make(chan error, 1)
	go func() {
		done <- SpinWait(&w, func() bool { return atomic.LoadUint32(&w) == 1 }, time.Now().Add(5*time.Second), time.Second)
	}()
	time.Sleep(20 * time.Millisecond)
	atomic.StoreUint32(&w, 1)
	Wake(&w, 1)
	if err := <-done; err != nil {
		t.Fatalf("SpinWait = %v, want nil", err)
	}
}

func TestSpinWaitTimesOut(t *testing.T) {
	var w uint32
	err := SpinWait(&w, func() bool { return false }, time.Now().Add(30*time.Millisecond), 10*time.Millisecond)
	if err != ErrTimeout {
		t.Fatalf("SpinWait = %v, want ErrTimeout", err)
	}
}

func TestWaitReturnsAtOnceWhenValueDiffers(t *testing.T) {
	w := uint32(3)
	if err := Wait(&w, 2, time.Second); err != nil {
		t.Fatalf("Wait = %v", err)
	}
}
