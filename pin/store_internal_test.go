package pin

import "testing"

// A delta starts with the sizes of its base and of the object it makes, each
// a little-endian base-128 number; the writer counts the second.
func TestDeltaHeaderTarget(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		want int64
		ok   bool
	}{
		{"small", []byte{0x05, 0x07, 0x90}, 7, true},
		{"one GiB from 10 bytes", []byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x04}, 1 << 30, true},
		{"cut short", []byte{0x05, 0x80}, 0, false},
		{"empty", nil, 0, false},
		{"too long a number", []byte{0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d deltaHeader
			// in two writes, as the inflater may hand them
			half := len(c.b) / 2
			d.Write(c.b[:half])
			d.Write(c.b[half:])
			got, ok := d.target()
			if got != c.want || ok != c.ok {
				t.Errorf("target() = %d, %v; want %d, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
