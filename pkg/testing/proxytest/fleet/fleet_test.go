package fleet

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSizes(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []int
		wantErr bool
	}{
		"one":          {in: "1000", want: []int{1000}},
		"two, spaced":  {in: "1000, 10000", want: []int{1000, 10000}},
		"zero":         {in: "0", wantErr: true},
		"not a number": {in: "1000,x", wantErr: true},
		"empty":        {in: "", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSizes(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseSizes(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseSizes(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}
