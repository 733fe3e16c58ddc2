package api

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Tenant namespaces (setup(..., tenant_id=...), upstream's "tenant namespace for object keys").
//
// A client of tenant T stores its key k under the internal key TenantSep+T+TenantSep+k; the
// default tenant ("default" or "") stores k as it is, so stores without tenants are unchanged.
// Clients refuse user keys that contain TenantSep, so no tenant can name another's keys, and the
// master scopes remove_by_regex and remove_all to the caller's tenant (matching the pattern
// against the user part of each key).

// TenantSep separates a tenant's name from the user key in an internal key (ASCII unit separator).
const TenantSep = "\x1f"

// DefaultTenant is the tenant whose keys are stored unprefixed.
const DefaultTenant = "default"

// MaxTenantLength bounds a tenant id.
const MaxTenantLength = 64

// NormalizeTenant checks a tenant id and returns it in canonical form ("" for the default tenant).
func NormalizeTenant(t string) (string, error) {
	if t == "" || t == DefaultTenant {
		return "", nil
	}
	switch {
	case len(t) > MaxTenantLength:
		return "", Errorf(INVALID_PARAMS, "tenant_id is %d bytes, longer than the limit of %d", len(t), MaxTenantLength)
	case !utf8.ValidString(t):
		return "", Errorf(INVALID_PARAMS, "tenant_id is not valid UTF-8")
	case strings.Contains(t, TenantSep):
		return "", Errorf(INVALID_PARAMS, "tenant_id may not contain the byte 0x1f")
	}
	return t, nil
}

// ReservationPrefix begins the names of put reservations (store/client/reserve.go): puts a
// client starts ahead to write values of later puts into. No user key can begin with it (it
// holds TenantSep), and the master treats such puts apart (store/master/reserve.go).
const ReservationPrefix = TenantSep + "put-reservation" + TenantSep

// IsReservation reports whether key names a put reservation.
func IsReservation(key string) bool { return strings.HasPrefix(key, ReservationPrefix) }

// TenantKey is the internal key of user key k for (normalized) tenant t.
func TenantKey(t, k string) string {
	if t == "" {
		return k
	}
	return TenantSep + t + TenantSep + k
}

// SplitTenant splits an internal key into its (normalized) tenant and user key.
func SplitTenant(key string) (tenant, user string) {
	if !strings.HasPrefix(key, TenantSep) {
		return "", key
	}
	rest := key[len(TenantSep):]
	i := strings.Index(rest, TenantSep)
	if i < 0 {
		return "", key
	}
	return rest[:i], rest[i+len(TenantSep):]
}

// CheckUserKey refuses a user key that could name another tenant's keys.
func CheckUserKey(k string) error {
	if strings.Contains(k, TenantSep) {
		return Errorf(INVALID_KEY, "key %q contains the byte 0x1f, which separates tenant namespaces", k)
	}
	return nil
}

// DisplayKey is how messages show an internal key: the user key (its first 64 bytes), and its
// tenant when not the default.
func DisplayKey(key string) string {
	t, k := SplitTenant(key)
	if len(k) > 64 {
		k = k[:64] + "..."
	}
	if t == "" {
		return fmt.Sprintf("%q", k)
	}
	return fmt.Sprintf("%q (tenant %q)", k, t)
}
