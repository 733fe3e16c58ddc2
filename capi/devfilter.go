package main

// set_device_filter and set_host_ip (mooncake.pg, as upstream's MooncakeBackend statics): which
// network interface, or which address, the process-wide engine listens on and advertises. They
// take effect when that engine is created (the first init_process_group, store setup() or
// engine); afterwards they only check that the running engine agrees.

import "C"

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
)

// engineAddr is the address set_device_filter or set_host_ip chose for the process-wide engine
// ("" when neither was called); procMu guards it with procEngine.
var engineAddr string

// interfaceAddr is the first IPv4 address of the first interface in names.
func interfaceAddr(names []string) (string, error) {
	if len(names) == 0 {
		return "", nil
	}
	for _, n := range names {
		if _, err := net.InterfaceByName(n); err != nil {
			return "", invalid(fmt.Sprintf("set_device_filter: no network interface %q on this host (it has: %s)", n, strings.Join(interfaceNames(), ", ")))
		}
	}
	ifc, _ := net.InterfaceByName(names[0])
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", fmt.Errorf("set_device_filter: reading the addresses of %q: %w", names[0], err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String(), nil
		}
	}
	return "", invalid(fmt.Sprintf("set_device_filter: interface %q has no IPv4 address", names[0]))
}

func interfaceNames() []string {
	ifs, _ := net.Interfaces()
	var out []string
	for _, i := range ifs {
		out = append(out, i.Name)
	}
	slices.Sort(out)
	return out
}

// useEngineAddr records addr for the engine created next, or checks the running one uses it.
func useEngineAddr(call, addr string) error {
	procMu.Lock()
	defer procMu.Unlock()
	if procEngine != nil && addr != "" {
		host, _, err := net.SplitHostPort(procEngine.SegmentName())
		if err != nil || host != addr {
			return invalid(fmt.Sprintf("%s: this process's transfer engine already runs as %q; call it before the first process group, store or engine of the process", call, procEngine.SegmentName()))
		}
	}
	engineAddr = addr
	return nil
}

//export mc_set_device_filter
func mc_set_device_filter(names *C.char) C.int {
	var list []string
	if err := json.Unmarshal([]byte(goString(names)), &list); err != nil {
		return setErr(invalid(fmt.Sprintf("set_device_filter: want a JSON list of interface names: %v", err)))
	}
	addr, err := interfaceAddr(list)
	if err != nil {
		return setErr(err)
	}
	return setErr(useEngineAddr("set_device_filter", addr))
}

//export mc_set_host_ip
func mc_set_host_ip(ip *C.char) C.int {
	s := strings.TrimSpace(goString(ip))
	if s != "" && net.ParseIP(s) == nil {
		return setErr(invalid(fmt.Sprintf("set_host_ip: %q is not an IP address", s)))
	}
	return setErr(useEngineAddr("set_host_ip", s))
}
