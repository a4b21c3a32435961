package forward

// The coarse lateness histogram: cumulative since the emulator started, exported
// sparse in every statistics file, so that a reader who takes two snapshots around
// a page load can subtract them and get that load's own lateness distribution
// (quicbed.link.loadproof). The fine histogram (1 us buckets up to 100 ms) serves
// the whole-run percentiles; it is too large to export on every snapshot.
//
// Buckets are decades split in 90-100 linear steps, so every bucket is at most 10 %
// of its lower edge wide from 100 us on:
//
//	[0, 1 ms)      10 us   (buckets 0-99)
//	[1, 10 ms)    100 us   (100-189)
//	[10, 100 ms)    1 ms   (190-279)
//	[100 ms, 1 s)  10 ms   (280-369)
//	[1, 10 s)     100 ms   (370-459)
//	>= 10 s                 (460)
const coarseBuckets = 461

type decade struct {
	from, to, step int64 // microseconds
	first          int   // index of the decade's first bucket
}

var decades = [...]decade{
	{0, 1_000, 10, 0},
	{1_000, 10_000, 100, 100},
	{10_000, 100_000, 1_000, 190},
	{100_000, 1_000_000, 10_000, 280},
	{1_000_000, 10_000_000, 100_000, 370},
}

// coarseBucket is the index of the bucket that holds a lateness of us microseconds.
func coarseBucket(us int64) int {
	if us < 0 {
		us = 0
	}
	for _, d := range decades {
		if us < d.to {
			return d.first + int((us-d.from)/d.step)
		}
	}
	return coarseBuckets - 1
}

// coarseLow is the lower edge of bucket i in microseconds.
func coarseLow(i int) int64 {
	for k := len(decades) - 1; k >= 0; k-- {
		if d := decades[k]; i >= d.first {
			return d.from + int64(i-d.first)*d.step
		}
	}
	return 0
}

// sparse is the histogram's non-empty buckets as [lower edge us, count] pairs,
// lowest first.
func sparse(h *[coarseBuckets]uint64) [][2]uint64 {
	out := [][2]uint64{}
	for i, c := range h {
		if c > 0 {
			out = append(out, [2]uint64{uint64(coarseLow(i)), c})
		}
	}
	return out
}
