package api

import (
	"strings"
	"testing"
)

func TestTenantKeys(t *testing.T) {
	for _, c := range []struct{ tenant, key, internal string }{
		{"", "k", "k"},
		{"alpha", "k", "\x1falpha\x1fk"},
		{"alpha", "", "\x1falpha\x1f"},
		{"a/b c", "x/y", "\x1fa/b c\x1fx/y"},
	} {
		if got := TenantKey(c.tenant, c.key); got != c.internal {
			t.Fatalf("TenantKey(%q, %q) = %q, want %q", c.tenant, c.key, got, c.internal)
		}
		if tt, k := SplitTenant(c.internal); tt != c.tenant || k != c.key {
			t.Fatalf("SplitTenant(%q) = %q, %q", c.internal, tt, k)
		}
	}
	if tt, k := SplitTenant("\x1fno-end"); tt != "" || k != "\x1fno-end" {
		t.Fatalf("a key with one separator is the default tenant's: %q %q", tt, k)
	}
	for in, want := range map[string]string{"": "", "default": "", "alpha": "alpha"} {
		if got, err := NormalizeTenant(in); err != nil || got != want {
			t.Fatalf("NormalizeTenant(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"a\x1fb", strings.Repeat("t", MaxTenantLength+1), "\xff"} {
		if _, err := NormalizeTenant(bad); !Is(err, INVALID_PARAMS) {
			t.Fatalf("NormalizeTenant(%q): %v", bad, err)
		}
	}
	if err := CheckUserKey("a\x1fb"); !Is(err, INVALID_KEY) {
		t.Fatalf("CheckUserKey: %v", err)
	}
	if err := CheckUserKey("plain/key"); err != nil {
		t.Fatal(err)
	}
	if got := DisplayKey("\x1falpha\x1fk"); got != `"k" (tenant "alpha")` {
		t.Fatal(got)
	}
}
