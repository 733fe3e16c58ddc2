package engine

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// HostID identifies the host as peers see it: the kernel boot id plus the inode of this
// process's network namespace, so two network namespaces on one machine are two hosts.
func HostID() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	id := strings.TrimSpace(string(boot))
	if err != nil || id == "" {
		h, _ := os.Hostname()
		id = "host-" + h
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &st); err == nil {
		id += "/netns-" + strconv.FormatUint(st.Ino, 10)
	}
	return id
}

// localIP returns the address peers should use: the first up, non-loopback IPv4 address,
// else 127.0.0.1.
func localIP() string {
	ifs, err := net.Interfaces()
	if err == nil {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok {
					if ip4 := ipn.IP.To4(); ip4 != nil && !ip4.IsLinkLocalUnicast() {
						return ip4.String()
					}
				}
			}
		}
	}
	return "127.0.0.1"
}
