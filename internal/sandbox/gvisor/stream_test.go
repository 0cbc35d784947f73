package gvisor

import (
	"bytes"
	"testing"
)

// TestStreamMarker feeds a stream in every possible split of the same bytes:
// the marker is found across reads, output is bounded, and what follows the
// marker is not the run's.
func TestStreamMarker(t *testing.T) {
	marker := endMarker("0123456789abcdef0123456789abcdef")
	body := []byte("hello \x00CI-END:0123 world \x00CI-END")
	input := append(append(append([]byte(nil), body...), marker...), "after"...)
	for _, limit := range []int{1000, 10, 0} {
		for split := 0; split <= len(input); split++ {
			for split2 := split; split2 <= len(input); split2 += 7 {
				s := newStream(limit)
				done := s.arm(marker)
				s.feed(input[:split])
				s.feed(input[split:split2])
				s.feed(input[split2:])
				select {
				case <-done:
				default:
					t.Fatalf("limit %d split %d/%d: marker not seen", limit, split, split2)
				}
				got, dropped := s.take()
				want := body[:min(limit, len(body))]
				if !bytes.Equal(got, want) || dropped != int64(len(body)-len(want)) {
					t.Fatalf("limit %d split %d/%d: got %q (+%d), want %q (+%d)", limit, split, split2, got, dropped, want, len(body)-len(want))
				}
			}
		}
	}
}

// TestStreamUnarmed drops bytes outside a run and keeps a partial marker as
// output when the run ends without one.
func TestStreamUnarmed(t *testing.T) {
	s := newStream(100)
	s.feed([]byte("between runs"))
	marker := endMarker("n")
	s.arm(marker)
	s.feed([]byte("out\x00CI-E"))
	got, dropped := s.take()
	if string(got) != "out\x00CI-E" || dropped != 0 {
		t.Fatalf("got %q (+%d)", got, dropped)
	}
}
