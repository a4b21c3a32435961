package replay

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The shared table (tests/data/replay/match-cases.json), which
// tests/test_replay_rules.py runs against the Python rule.
var matchCases = filepath.Join("..", "..", "..", "tests", "data", "replay", "match-cases.json")

type matchTable struct {
	Archive json.RawMessage `json:"archive"`
	Cases   []struct {
		Name   string  `json:"name"`
		Method string  `json:"method"`
		URL    string  `json:"url"`
		Entry  *string `json:"entry"`
		Match  How     `json:"match"`
	} `json:"cases"`
}

func TestMatchCases(t *testing.T) {
	data, err := os.ReadFile(matchCases)
	if err != nil {
		t.Fatal(err)
	}
	var table matchTable
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatal(err)
	}
	a, err := Parse(table.Archive)
	if err != nil {
		t.Fatalf("the table's archive: %v", err)
	}
	seen := map[How]bool{}
	for _, c := range table.Cases {
		seen[c.Match] = true
		e, how, err := a.Match(c.Method, c.URL)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		var got *string
		if e != nil {
			got = &e.URL
		}
		if how != c.Match || (got == nil) != (c.Entry == nil) || (got != nil && *got != *c.Entry) {
			t.Errorf("%s: %s %s: got %v %s, want %v %s", c.Name, c.Method, c.URL, deref(got), how, deref(c.Entry), c.Match)
		}
	}
	if len(table.Cases) < 30 || !seen[ByURL] || !seen[ByPath] || !seen[None] {
		t.Fatalf("the table has %d cases, matched by %v", len(table.Cases), seen)
	}
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// SplitURL splits as Python's urlsplit (quicbed.replay.archive.split_url).
func TestSplitURL(t *testing.T) {
	cases := map[string][3]string{
		"https://a.example":                  {"https://a.example", "/", ""},
		"HTTPS://A.Example:443/x?y#z":        {"https://a.example", "/x", "y"},
		"https://a.example:8443/x?y=1&z=%20": {"https://a.example:8443", "/x", "y=1&z=%20"},
		"https://user@a.example/p":           {"https://a.example", "/p", ""},
		"https://a.example?q":                {"https://a.example", "/", "q"},
		"https://a.example#f?q":              {"https://a.example", "/", ""},
		"https://[::1]:444/p":                {"https://::1:444", "/p", ""},
		"https://a.example:/p":               {"https://a.example", "/p", ""},
	}
	for in, want := range cases {
		o, p, q, err := SplitURL(in)
		if err != nil || [3]string{o, p, q} != want {
			t.Errorf("%s: got %q %q %q %v, want %q", in, o, p, q, err, want)
		}
	}
	for _, bad := range []string{"http://a.example/", "https:///p", "a.example/p", "https://a.example:x/", "https://a.example:70000/", "https://a.example:+1/"} {
		if _, _, _, err := SplitURL(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
