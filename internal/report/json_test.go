package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadJSON(t *testing.T) {
	var good bytes.Buffer
	if err := JSON(&good, sample()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in, err string
	}{
		{name: "a result", in: good.String()},
		{name: "not JSON", in: "scenario: scale-out", err: "not a pinlab lab run -o json result: invalid character"},
		{name: "an unknown field", in: `{"scenario": "x", "variants": [{"name": "a"}], "colour": 1}`, err: `unknown field "colour"`},
		{name: "no variants", in: `{"scenario": "x"}`, err: "no scenario or no variants"},
		{name: "two results", in: good.String() + good.String(), err: "more data after the result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadJSON(strings.NewReader(tc.in))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("ReadJSON: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("ReadJSON error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// TestReadJSONWritten: pinlab report reads back a result lab run -o json
// wrote and writes it again unchanged, no field lost or renamed. The golden
// files were written before report.Variant embedded verdict.Expectations,
// so they stand for the files users kept.
func TestReadJSONWritten(t *testing.T) {
	for _, name := range []string{"scale-out.golden.json", filepath.Join("new", "result.golden.json")} {
		t.Run(name, func(t *testing.T) {
			saved, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			res, err := ReadJSON(bytes.NewReader(saved))
			if err != nil {
				t.Fatal(err)
			}
			var again bytes.Buffer
			if err := JSON(&again, res); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(saved), again.String()); diff != "" {
				t.Errorf("written again (-saved +again):\n%s", diff)
			}
		})
	}
}
