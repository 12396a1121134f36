package report

import (
	"bytes"
	"strings"
	"testing"
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
