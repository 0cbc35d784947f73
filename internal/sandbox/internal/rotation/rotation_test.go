package rotation

import (
	"sync"
	"testing"
)

func TestCounter(t *testing.T) {
	tests := []struct {
		name     string
		every    int
		sessions int
		want     []int // the sessions (1-based) that must rotate, with Done(true) right after each
	}{
		{"never", 0, 10, nil},
		{"negative never", -1, 10, nil},
		{"every session", 1, 3, []int{1, 2, 3}},
		{"every third", 3, 10, []int{3, 6, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.every)
			var got []int
			for i := 1; i <= tt.sessions; i++ {
				if c.Session() {
					got = append(got, i)
					c.Done(true)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("rotated at %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("rotated at %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// While a rotation is under way nobody else is asked to take one, and a
// failed one is asked for again by the next session.
func TestCounterOneRotationAtATime(t *testing.T) {
	c := New(2)
	c.Session()
	if !c.Session() {
		t.Fatal("the second session did not ask for a rotation")
	}
	for i := 0; i < 5; i++ {
		if c.Session() {
			t.Fatal("a second rotation was asked for while one is under way")
		}
	}
	c.Done(false)
	if !c.Session() {
		t.Fatal("after a failed rotation the next session did not ask again")
	}
	c.Done(true)
	if c.Session() {
		t.Fatal("the count did not start again after a successful rotation")
	}
}

func TestCounterConcurrent(t *testing.T) {
	c := New(10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	asked := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if c.Session() {
					mu.Lock()
					asked++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if asked != 1 {
		t.Fatalf("%d rotations asked for without Done, want 1", asked)
	}
}
