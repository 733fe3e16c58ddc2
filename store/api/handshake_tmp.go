package api

// TEMPORARY stand-in for package auth's handshake (branch auth-engine), replaced at merge.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
)

var errAuthRefused = errors.New("authentication failed")

func tmpMAC(token []byte, side byte, nc, ns []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte{side})
	m.Write(nc)
	m.Write(ns)
	return m.Sum(nil)
}

func clientHandshake(_ context.Context, c net.Conn, token []byte) error {
	nc := make([]byte, 32)
	rand.Read(nc)
	if _, err := c.Write(nc); err != nil {
		return err
	}
	buf := make([]byte, 64)
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("%w: the master hung up (%v)", errAuthRefused, err)
	}
	if !hmac.Equal(buf[32:], tmpMAC(token, 'S', nc, buf[:32])) {
		return fmt.Errorf("%w: the master does not know this token", errAuthRefused)
	}
	_, err := c.Write(tmpMAC(token, 'C', nc, buf[:32]))
	return err
}

func serverHandshake(c net.Conn, token []byte) error {
	nc := make([]byte, 32)
	if _, err := io.ReadFull(c, nc); err != nil {
		return err
	}
	ns := make([]byte, 32)
	rand.Read(ns)
	if _, err := c.Write(append(ns, tmpMAC(token, 'S', nc, ns)...)); err != nil {
		return err
	}
	proof := make([]byte, 32)
	if _, err := io.ReadFull(c, proof); err != nil {
		return err
	}
	if !hmac.Equal(proof, tmpMAC(token, 'C', nc, ns)) {
		return fmt.Errorf("%w: wrong token", errAuthRefused)
	}
	return nil
}

func isAuthRefusal(err error) bool { return errors.Is(err, errAuthRefused) }
