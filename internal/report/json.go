package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// JSON writes r as indented JSON.
func JSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads a result written by JSON (pinlab lab run -o json), so that
// it can be rendered again. Fields it does not know are refused, as is
// anything after the result: such a file is not a pinlab result, or one
// from another version.
func ReadJSON(r io.Reader) (*Result, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var res Result
	if err := dec.Decode(&res); err != nil {
		return nil, fmt.Errorf("report: not a pinlab lab run -o json result: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("report: not a pinlab lab run -o json result: more data after the result")
	}
	if res.Scenario == "" || len(res.Variants) == 0 {
		return nil, errors.New("report: not a pinlab lab run -o json result: no scenario or no variants in it")
	}
	return &res, nil
}
