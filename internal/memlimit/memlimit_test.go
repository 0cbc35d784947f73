package memlimit

import "testing"

// TestChoicesRoundTrip: each of OpenAI's values parses to its size and is
// spelled back the same, and the default is one of them.
func TestChoicesRoundTrip(t *testing.T) {
	found := false
	for _, c := range Choices() {
		if b, ok := Parse(c.Name); !ok || b != c.Bytes {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.Name, b, ok, c.Bytes)
		}
		if got := Format(c.Bytes); got != c.Name {
			t.Errorf("Format(%d) = %q, want %q", c.Bytes, got, c.Name)
		}
		if c.Name == Default {
			found = c.Bytes == DefaultBytes
		}
	}
	if !found {
		t.Errorf("Default %q (%d bytes) is not one of Choices", Default, DefaultBytes)
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{1 << 30: "1g", 3 << 30: "3g", 512 << 20: "512m", 1<<30 + 1<<20: "1025m", 1000: "1000"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}
