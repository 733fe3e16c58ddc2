// Command tcpstream measures what TCP carries one way between two hosts (or two network
// namespaces): bench/engine_netns.py's bound for the transfer engine's tcp transport.
//
//	tcpstream -recv -port 17001 -conns 4          # prints LISTENING, exits after the sender
//	tcpstream -send -addr 10.0.0.1:17001 -conns 4 -seconds 2 -chunk 4194304
//
// The sender writes chunk-sized buffers on each connection until the time is up, closes its
// side, and waits for the receiver's byte count: the figure (printed as "BOUND <GB/s>",
// 1 GB = 1e9 B) covers bytes that reached the receiver, not bytes queued in the sender's kernel.
// Go moves the bytes, as in the engine, with no copy beyond the kernel's.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

func main() {
	recv := flag.Bool("recv", false, "receive (listen on -port)")
	send := flag.Bool("send", false, "send to -addr")
	port := flag.Int("port", 17001, "port to listen on (-recv)")
	addr := flag.String("addr", "", "receiver's host:port (-send)")
	conns := flag.Int("conns", 1, "connections")
	seconds := flag.Float64("seconds", 2, "how long to send")
	chunk := flag.Int("chunk", 4<<20, "bytes per write")
	flag.Parse()
	var err error
	switch {
	case *recv:
		err = receive(*port, *conns)
	case *send:
		err = stream(*addr, *conns, *chunk, time.Duration(*seconds*float64(time.Second)))
	default:
		err = errors.New("give -recv or -send")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpstream:", err)
		os.Exit(1)
	}
}

func receive(port, conns int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("LISTENING")
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := 0; i < conns; i++ {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			// Large reads, as the engine's receiver makes (io.Discard would read 8 KiB at a
			// time and make the receiver's system calls the bound).
			buf := make([]byte, 4<<20)
			var n int64
			for {
				k, err := c.Read(buf)
				n += int64(k)
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- err
					return
				}
			}
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(n))
			if _, err := c.Write(b[:]); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func stream(addr string, conns, chunk int, d time.Duration) error {
	cs := make([]*net.TCPConn, conns)
	for i := range cs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		cs[i] = c.(*net.TCPConn)
		defer c.Close()
	}
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	deadline := start.Add(d)
	got := make([]uint64, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func(i int, c *net.TCPConn) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := c.Write(buf); err != nil {
					errs[i] = err
					return
				}
			}
			if err := c.CloseWrite(); err != nil {
				errs[i] = err
				return
			}
			var b [8]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				errs[i] = fmt.Errorf("the receiver's count: %w", err)
				return
			}
			got[i] = binary.LittleEndian.Uint64(b[:])
		}(i, c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	var total uint64
	for i := range got {
		if errs[i] != nil {
			return errs[i]
		}
		total += got[i]
	}
	fmt.Printf("BOUND %.4f\n", float64(total)/elapsed.Seconds()/1e9)
	return nil
}
