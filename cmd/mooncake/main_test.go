package main

import "testing"

func TestDispatch(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want int
	}{
		{[]string{"mooncake"}, 2},                                       // no command
		{[]string{"/usr/bin/nosuchcmd", "-h"}, 2},                       // unknown name
		{[]string{"/x/bin/mooncake_master", "-h"}, 0},                   // by argv[0]'s base name
		{[]string{"transfer_engine_bench", "--mode=nope"}, 2},           // the command's own usage error
		{[]string{"mooncake", "mooncake_client", "-h"}, 0},              // by first argument
		{[]string{"mooncake", "mooncake_http_metadata_server", "x"}, 2}, // its usage error
		{[]string{"mooncake", "transfer_engine_bench", "extra"}, 2},
	} {
		if got := run(tc.argv); got != tc.want {
			t.Errorf("run(%q) = %d, want %d", tc.argv, got, tc.want)
		}
	}
}
