package store

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"k8s.io/apimachinery/pkg/labels"
)

// dumpState writes every field of st, canonically: maps sorted by their
// keys' dump, times as Unix nanoseconds, selectors as their String(),
// pointers followed once (numbered in the order the walk meets them, so
// that sharing and cycles show), a nil slice as an empty one. It ignores no field but those that are
// not state (notState), and returns the paths of the ones it skipped, so
// that a test can hold that list to what the docs say.
func dumpState(st *state) (string, []string) {
	d := &dumper{seen: map[uintptr]int{}, skipped: map[string]bool{}}
	d.value("state", reflect.ValueOf(st).Elem())
	skipped := slices.Sorted(func(yield func(string) bool) {
		for k := range d.skipped {
			if !yield(k) {
				return
			}
		}
	})
	return d.b.String(), skipped
}

// notState are the fields, by struct type and field name, that the replay
// does not compare: this replica's waiters and wake-ups, the scratch of a
// selection, where measurements go, and the list of policies (each is
// dumped where the state names it).
var notState = map[string]bool{
	"state.wake": true, "state.metrics": true, "state.policies": true,
	"demand.waiters": true, "demand.waiterSeq": true, "demand.notify": true,
	"budgets.check": true, "tiers.check": true, "cooldowns.check": true, "siteBans.check": true,
	"budgets.metrics": true, "tiers.metrics": true, "cooldowns.metrics": true, "rules.metrics": true,
	"tally.metrics": true, "sessions.metrics": true, "sessionStates.metrics": true, "siteBans.metrics": true, "siteBans.siteOf": true,
}

type dumper struct {
	b       strings.Builder
	seen    map[uintptr]int
	skipped map[string]bool
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	selectorType = reflect.TypeFor[labels.Selector]()
)

func (d *dumper) value(path string, v reflect.Value) {
	switch {
	case v.Type() == timeType:
		fmt.Fprintf(&d.b, "%s=t%d\n", path, timeNanos(v))
		return
	case v.Type() == selectorType:
		if v.IsNil() {
			fmt.Fprintf(&d.b, "%s=sel(nil)\n", path)
		} else {
			fmt.Fprintf(&d.b, "%s=sel(%s)\n", path, selectorOf(v))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			fmt.Fprintf(&d.b, "%s=nil\n", path)
			return
		}
		if id, ok := d.seen[v.Pointer()]; ok {
			fmt.Fprintf(&d.b, "%s=*%d\n", path, id)
			return
		}
		id := len(d.seen) + 1
		d.seen[v.Pointer()] = id
		fmt.Fprintf(&d.b, "%s=&%d\n", path, id)
		d.value(path+"@", v.Elem())
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			name := t.Name() + "." + t.Field(i).Name
			if notState[name] {
				d.skipped[name] = true
				continue
			}
			d.value(path+"."+t.Field(i).Name, v.Field(i))
		}
	case reflect.Map:
		keys := v.MapKeys()
		type entry struct {
			key  string
			v    reflect.Value
			kdmp string
		}
		entries := make([]entry, 0, len(keys))
		for _, k := range keys {
			kd := &dumper{seen: map[uintptr]int{}, skipped: map[string]bool{}}
			kd.value("", k)
			entries = append(entries, entry{key: kd.b.String(), v: v.MapIndex(k)})
		}
		slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
		fmt.Fprintf(&d.b, "%s=map[%d]\n", path, len(entries))
		for _, e := range entries {
			d.value(path+"["+strings.ReplaceAll(strings.TrimSpace(e.key), "\n", ",")+"]", e.v)
		}
	case reflect.Slice, reflect.Array:
		// A nil slice and an empty one hold the same: neither is more state.
		fmt.Fprintf(&d.b, "%s=[%d]\n", path, v.Len())
		if v.Type().Elem().Kind() == reflect.Uint8 {
			fmt.Fprintf(&d.b, "%s=%x\n", path, bytesOf(v))
			return
		}
		for i := range v.Len() {
			d.value(fmt.Sprintf("%s[%d]", path, i), v.Index(i))
		}
	case reflect.Interface:
		if v.IsNil() {
			fmt.Fprintf(&d.b, "%s=nil\n", path)
			return
		}
		d.value(path+"("+v.Elem().Type().String()+")", v.Elem())
	case reflect.String:
		fmt.Fprintf(&d.b, "%s=%q\n", path, v.String())
	case reflect.Bool:
		fmt.Fprintf(&d.b, "%s=%v\n", path, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		fmt.Fprintf(&d.b, "%s=%d\n", path, v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		fmt.Fprintf(&d.b, "%s=%d\n", path, v.Uint())
	case reflect.Float32, reflect.Float64:
		fmt.Fprintf(&d.b, "%s=%v\n", path, v.Float())
	default:
		panic(fmt.Sprintf("dumpState: %s: cannot dump a %s; name it in notState if it is not state", path, v.Kind()))
	}
}

// timeNanos is a time.Time value's Unix nanoseconds (0: the zero time),
// read from its fields: the value may be an unexported map element, which
// reflect neither hands out nor addresses. It follows time.Time's layout:
// wall holds the nanoseconds, and the seconds when its top bit is set
// (since 1885, beside a monotonic reading in ext); else ext holds the
// seconds since year 1. TestTimeNanos holds it to UnixNano.
func timeNanos(v reflect.Value) int64 {
	const (
		hasMonotonic   = 1 << 63
		nsecMask       = 1<<30 - 1
		nsecShift      = 30
		wallToInternal = (1884*365 + 1884/4 - 1884/100 + 1884/400) * 86400
		unixToInternal = (1969*365 + 1969/4 - 1969/100 + 1969/400) * 86400
	)
	wall, ext := v.Field(0).Uint(), v.Field(1).Int()
	nsec := int64(wall & nsecMask)
	sec := ext
	if wall&hasMonotonic != 0 {
		sec = wallToInternal + int64(wall<<1>>(nsecShift+1))
	}
	if sec == 0 && nsec == 0 {
		return 0
	}
	return (sec-unixToInternal)*1e9 + nsec
}

func selectorOf(v reflect.Value) string {
	if v.CanInterface() {
		return v.Interface().(labels.Selector).String()
	}
	return reflect.NewAt(selectorType, unsafe.Pointer(v.UnsafeAddr())).Elem().Interface().(labels.Selector).String()
}

func bytesOf(v reflect.Value) []byte {
	out := make([]byte, v.Len())
	for i := range out {
		out[i] = byte(v.Index(i).Uint())
	}
	return out
}

func TestTimeNanos(t *testing.T) {
	for _, tm := range []time.Time{{}, t0, time.Unix(0, 1), time.Unix(0, t0.UnixNano()), time.Now(), time.Unix(-5, 7)} {
		want := unixNano(tm)
		if got := timeNanos(reflect.ValueOf(tm)); got != want {
			t.Errorf("timeNanos(%v) = %d, want %d", tm, got, want)
		}
	}
}
