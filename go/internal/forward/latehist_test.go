package forward

import "testing"

func TestCoarseBucketsTileTheRangeAtTenPercent(t *testing.T) {
	if coarseLow(coarseBuckets-1) != 10_000_000 {
		t.Fatalf("overflow bucket starts at %d us, want 10 s", coarseLow(coarseBuckets-1))
	}
	prev := int64(-1)
	for i := 0; i < coarseBuckets; i++ {
		low := coarseLow(i)
		if low <= prev {
			t.Fatalf("bucket %d starts at %d us, not after bucket %d's %d", i, low, i-1, prev)
		}
		if got := coarseBucket(low); got != i {
			t.Fatalf("a lateness of %d us falls in bucket %d, want %d", low, got, i)
		}
		if i > 0 && prev >= 100 {
			if width := low - prev; width*10 > prev {
				t.Fatalf("bucket %d is %d us wide from %d us: over 10 %%", i-1, width, prev)
			}
		}
		prev = low
	}
}

func TestCoarseBucketEdges(t *testing.T) {
	for _, tc := range []struct {
		us   int64
		want int
	}{
		{-5, 0}, {0, 0}, {9, 0}, {10, 1}, {999, 99}, {1_000, 100}, {1_099, 100},
		{9_999, 189}, {10_000, 190}, {23_500, 203}, {200_000, 290}, {9_999_999, 459},
		{10_000_000, 460}, {1 << 40, 460},
	} {
		if got := coarseBucket(tc.us); got != tc.want {
			t.Errorf("coarseBucket(%d) = %d, want %d", tc.us, got, tc.want)
		}
	}
}

func TestSparseListsOnlyFilledBuckets(t *testing.T) {
	var h [coarseBuckets]uint64
	h[coarseBucket(0)] = 3
	h[coarseBucket(200_000)] = 1
	got := sparse(&h)
	want := [][2]uint64{{0, 3}, {200_000, 1}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("sparse = %v, want %v", got, want)
	}
	var empty [coarseBuckets]uint64
	if s := sparse(&empty); s == nil || len(s) != 0 {
		t.Fatalf("an empty histogram is %v, want [] (JSON [] rather than null)", s)
	}
}
