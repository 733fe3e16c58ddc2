package client

import (
	"context"
	"math"
	"slices"

	"github.com/mooncake-go/mooncake/store/api"
)

// Ranged-read templates and plans (upstream's prepare_get_into_ranges_template / _plan and
// get_into_ranges_from_template / _plan): byte geometry checked once and kept here, so a batch
// that repeats it passes a handle per row instead of every range. The limits and the first
// words of every error message are upstream's (its binding raises them as ValueError).

// Limits of templates, plans and their batches (upstream's).
const (
	MaxTemplateRanges = 1_000_000 // ranges of one template, one plan, one batch
	MaxRangeBytes     = 1 << 40   // bytes of one template, one plan, one batch
	MaxRangeRows      = 100_000   // rows (or plans) and buffers of one batch; templates of one plan; objects of one plan batch
	MaxPlanRegion     = 100_000   // a plan object's region (buffer index) is below this
)

// RangeTemplate is immutable byte geometry: for each range a destination offset (from a buffer
// chosen per read), a source offset in an object and a size. It names no object, address,
// replica or lease, so one template serves any number of concurrent reads.
type RangeTemplate struct {
	dst, src, size []uint64
	maxDstEnd      uint64 // the highest dst+size
	total          uint64 // the sum of the sizes
}

// NewRangeTemplate checks and copies a template: 1 to MaxTemplateRanges ranges, each of at
// least one byte, at most MaxRangeBytes in all, and offsets whose ends fit 64 bits.
func NewRangeTemplate(dst, src, size []uint64) (*RangeTemplate, error) {
	n := len(size)
	if n == 0 || n > MaxTemplateRanges || len(dst) != n || len(src) != n {
		return nil, api.Errorf(api.INVALID_PARAMS, "Invalid ranged-read template shape: %d destinations, %d sources and %d sizes (want as many of each, 1 to %d)",
			len(dst), len(src), n, MaxTemplateRanges)
	}
	t := &RangeTemplate{dst: slices.Clone(dst), src: slices.Clone(src), size: slices.Clone(size)}
	for i, s := range t.size {
		if s == 0 || s > MaxRangeBytes-t.total || t.dst[i] > math.MaxUint64-s || t.src[i] > math.MaxUint64-s {
			return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read template exceeds bounds: range %d (destination %d, source %d, size %d): sizes are at least 1 byte and at most 2^40 in all, and offset+size must fit 64 bits",
				i, t.dst[i], t.src[i], s)
		}
		t.total += s
		t.maxDstEnd = max(t.maxDstEnd, t.dst[i]+s)
	}
	return t, nil
}

// Len is the number of ranges.
func (t *RangeTemplate) Len() int { return len(t.size) }

// Bytes is the sum of the ranges' sizes.
func (t *RangeTemplate) Bytes() uint64 { return t.total }

// group is the template's ranges read from key into base+translation+destination.
func (t *RangeTemplate) group(key string, base uintptr, translation uint64) RangeGroup {
	g := RangeGroup{Key: key, Frags: make([]Range, len(t.size)), Whole: true, Buffer: base}
	for i := range t.size {
		// translation+dst+size fits 64 bits (checked); a range whose address would wrap around
		// (or of a NULL buffer) gets address 0, which no registered buffer holds, so checkRange
		// refuses it.
		var dst uintptr
		if off := translation + t.dst[i]; base != 0 && uint64(base) <= math.MaxUint64-off-t.size[i] {
			dst = base + uintptr(off)
		}
		g.Frags[i] = Range{Src: t.src[i], Dst: dst, Size: t.size[i]}
	}
	return g
}

// ReadTemplates reads, for each row i, templates[i] from object keys[i] into
// buffers[indices[i]] with every destination moved by translations[i] bytes. Row i is true when
// every range read its whole size. A row that cannot be read (a missing key, a range outside the
// object or the registered buffer, a lease over) is false and its destination is left as it was
// where the failure is known before reading. Malformed batches fail with INVALID_PARAMS and
// upstream's messages: "Ranged-read template batch shape differs" (lengths, more than
// MaxRangeRows rows or buffers), "Ranged-read template batch exceeds bounds" (a nil template,
// an index past the buffers, a translation that overflows, more than MaxTemplateRanges ranges
// or MaxRangeBytes bytes in all).
func (s *Snapshot) ReadTemplates(ctx context.Context, templates []*RangeTemplate, buffers []uintptr, indices []uint64,
	keys []string, translations []uint64, allowStaging bool) ([]bool, error) {
	n := len(keys)
	if n > MaxRangeRows || len(buffers) > MaxRangeRows || len(templates) != n || len(indices) != n || len(translations) != n {
		return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read template batch shape differs: %d templates, %d buffer indices, %d keys, %d translations and %d buffers (want one of each per row, at most %d rows and %d buffers)",
			len(templates), len(indices), n, len(translations), len(buffers), MaxRangeRows, MaxRangeRows)
	}
	var ranges, bytes uint64
	for i, t := range templates {
		switch {
		case t == nil:
			return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read template batch exceeds bounds: row %d has no template", i)
		case indices[i] >= uint64(len(buffers)):
			return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read template batch exceeds bounds: row %d names buffer %d of %d", i, indices[i], len(buffers))
		case translations[i] > math.MaxUint64-t.maxDstEnd:
			return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read template batch exceeds bounds: row %d: translation %d overflows the template's destinations", i, translations[i])
		case uint64(t.Len()) > MaxTemplateRanges-ranges || t.total > MaxRangeBytes-bytes:
			return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read template batch exceeds bounds: more than %d ranges or 2^40 bytes by row %d", MaxTemplateRanges, i)
		}
		ranges += uint64(t.Len())
		bytes += t.total
	}
	if n == 0 {
		return []bool{}, nil
	}
	groups := make([]RangeGroup, n)
	for i, t := range templates {
		groups[i] = t.group(keys[i], buffers[indices[i]], translations[i])
	}
	got, errs := s.GetRanges(ctx, groups, allowStaging)
	ok := make([]bool, n)
	for i := range groups {
		ok[i] = complete(groups[i], got[i], errs[i])
	}
	return ok, nil
}

// complete reports whether every fragment of g read its whole size.
func complete(g RangeGroup, got []uint64, errs []error) bool {
	for i, f := range g.Frags {
		if errs[i] != nil || got[i] != f.Size {
			return false
		}
	}
	return true
}

// RangePlan is a destination-run program over several objects of a page: object (region,
// suffix) gets the ranges of every template appended to it, in the caller's order. Each
// template must tile its destination without gaps (a run), and a later template of the same
// object must start at or after the end of the previous one.
type RangePlan struct {
	objects []planObject
	ranges  uint64
	bytes   uint64
}

type planObject struct {
	suffix string
	region uint64
	geom   *RangeTemplate
}

// NewRangePlan builds a plan: row i appends templates[i] to object (regions[i], suffixes[i]).
// Errors (INVALID_PARAMS, upstream's messages): "Invalid ranged-read plan shape" (no rows, more
// than MaxRangeRows, lengths differ), "Ranged-read plan exceeds bounds" (a nil template, more
// than MaxTemplateRanges ranges or MaxRangeBytes bytes, a region of MaxPlanRegion or more),
// "Plan run destination is not contiguous", "Plan object destinations are not ordered".
func NewRangePlan(templates []*RangeTemplate, suffixes []string, regions []uint64) (*RangePlan, error) {
	n := len(templates)
	if n == 0 || n > MaxRangeRows || len(suffixes) != n || len(regions) != n {
		return nil, api.Errorf(api.INVALID_PARAMS, "Invalid ranged-read plan shape: %d templates, %d suffixes and %d regions (want as many of each, 1 to %d)",
			n, len(suffixes), len(regions), MaxRangeRows)
	}
	type slot struct {
		region uint64
		suffix string
	}
	slots := map[slot]int{}
	p := &RangePlan{}
	var dst, src, size [][]uint64
	for i, t := range templates {
		if t == nil || uint64(t.Len()) > MaxTemplateRanges-p.ranges || t.total > MaxRangeBytes-p.bytes || regions[i] >= MaxPlanRegion {
			return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read plan exceeds bounds: row %d (no template, more than %d ranges or 2^40 bytes in all, or a region of %d or more)",
				i, MaxTemplateRanges, MaxPlanRegion)
		}
		p.ranges += uint64(t.Len())
		p.bytes += t.total
		for k := 1; k < t.Len(); k++ {
			if t.dst[k-1]+t.size[k-1] != t.dst[k] {
				return nil, api.Errorf(api.INVALID_PARAMS, "Plan run destination is not contiguous: row %d, range %d starts at %d, not at %d where range %d ends",
					i, k, t.dst[k], t.dst[k-1]+t.size[k-1], k-1)
			}
		}
		key := slot{regions[i], suffixes[i]}
		j, ok := slots[key]
		if !ok {
			j = len(p.objects)
			slots[key] = j
			p.objects = append(p.objects, planObject{suffix: suffixes[i], region: regions[i]})
			dst, src, size = append(dst, nil), append(src, nil), append(size, nil)
		}
		if last := len(dst[j]) - 1; last >= 0 && dst[j][last]+size[j][last] > t.dst[0] {
			return nil, api.Errorf(api.INVALID_PARAMS, "Plan object destinations are not ordered: row %d starts object (%d, %q) at %d, before the end (%d) of its previous row",
				i, regions[i], suffixes[i], t.dst[0], dst[j][last]+size[j][last])
		}
		dst[j] = append(dst[j], t.dst...)
		src[j] = append(src[j], t.src...)
		size[j] = append(size[j], t.size...)
	}
	for j := range p.objects {
		g := &RangeTemplate{dst: dst[j], src: src[j], size: size[j]}
		for k, s := range g.size {
			g.total += s
			g.maxDstEnd = max(g.maxDstEnd, g.dst[k]+s)
		}
		p.objects[j].geom = g
	}
	return p, nil
}

// Ranges is the number of ranges of the plan.
func (p *RangePlan) Ranges() int { return int(p.ranges) }

// Objects is the number of distinct objects (region, suffix) of the plan.
func (p *RangePlan) Objects() int { return len(p.objects) }

// ReadPlans reads pages: page i runs plans[i] with object keys prefixes[i]+suffix, each object's
// destinations in buffers[region] moved by translations[i][region]. Page i is true when every
// range of every object read its whole size. Malformed batches fail with INVALID_PARAMS and
// upstream's messages: "Ranged-read plan batch shape differs" (more than MaxRangeRows plans or
// buffers, prefixes or translations not one per plan), "Ranged-read plan batch exceeds bounds"
// (a nil plan, a translations row not one per buffer, more than MaxTemplateRanges ranges,
// MaxRangeBytes bytes or MaxRangeRows objects in all), "Ranged-read plan translation exceeds
// bounds" (an object's region past the buffers, a translation that overflows).
func (s *Snapshot) ReadPlans(ctx context.Context, plans []*RangePlan, buffers []uintptr, prefixes []string,
	translations [][]uint64, allowStaging bool) ([]bool, error) {
	n, regions := len(plans), len(buffers)
	if n > MaxRangeRows || regions > MaxRangeRows || len(prefixes) != n || len(translations) != n {
		return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read plan batch shape differs: %d plans, %d prefixes, %d translation rows and %d buffers (want one prefix and one row per plan, at most %d plans and %d buffers)",
			n, len(prefixes), len(translations), regions, MaxRangeRows, MaxRangeRows)
	}
	var ranges, bytes, objects uint64
	for page, p := range plans {
		if p == nil || len(translations[page]) != regions || p.ranges > MaxTemplateRanges-ranges || p.bytes > MaxRangeBytes-bytes ||
			uint64(len(p.objects)) > MaxRangeRows-objects {
			return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read plan batch exceeds bounds: page %d (no plan, a translation row not one per buffer (%d), or more than %d ranges, 2^40 bytes or %d objects in all)",
				page, regions, MaxTemplateRanges, MaxRangeRows)
		}
		ranges += p.ranges
		bytes += p.bytes
		objects += uint64(len(p.objects))
		for _, o := range p.objects {
			if o.region >= uint64(regions) || translations[page][o.region] > math.MaxUint64-o.geom.maxDstEnd {
				return nil, api.Errorf(api.INVALID_PARAMS, "Ranged-read plan translation exceeds bounds: page %d, object %q in region %d of %d buffers", page, o.suffix, o.region, regions)
			}
		}
	}
	if n == 0 {
		return []bool{}, nil
	}
	groups := make([]RangeGroup, 0, objects)
	pageOf := make([]int, 0, objects)
	for page, p := range plans {
		for _, o := range p.objects {
			groups = append(groups, o.geom.group(prefixes[page]+o.suffix, buffers[o.region], translations[page][o.region]))
			pageOf = append(pageOf, page)
		}
	}
	got, errs := s.GetRanges(ctx, groups, allowStaging)
	ok := make([]bool, n)
	for i := range ok {
		ok[i] = true
	}
	for j, g := range groups {
		if !complete(g, got[j], errs[j]) {
			ok[pageOf[j]] = false
		}
	}
	return ok, nil
}
