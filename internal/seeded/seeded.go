// Package seeded is capstan's own randomness: generated names, shuffles,
// jitter. Unseeded, it is math/rand/v2's. A fault campaign seeds it
// through the environment, CAPSTAN_RANDOM_SEED=N, so that a run it
// replays draws the same names and orders as the run it replays (as far
// as goroutines draw in the same order).
package seeded

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
)

// Env seeds capstan's randomness.
const Env = "CAPSTAN_RANDOM_SEED"

var (
	mu sync.Mutex
	// rnd is the seeded source, nil when unseeded.
	rnd *rand.Rand
)

func init() {
	s := os.Getenv(Env)
	if s == "" {
		return
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "capstan: %s=%q is not a non-negative number: capstan's randomness is not seeded\n", Env, s)
		return
	}
	Seed(seed)
}

// Seed seeds capstan's randomness (a test, or the environment).
func Seed(seed uint64) {
	mu.Lock()
	defer mu.Unlock()
	rnd = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// IntN is a number in [0, n).
func IntN(n int) int {
	mu.Lock()
	defer mu.Unlock()
	if rnd == nil {
		return rand.IntN(n)
	}
	return rnd.IntN(n)
}

// Float64 is a number in [0, 1).
func Float64() float64 {
	mu.Lock()
	defer mu.Unlock()
	if rnd == nil {
		return rand.Float64()
	}
	return rnd.Float64()
}

// Shuffle shuffles n elements with swap.
func Shuffle(n int, swap func(i, j int)) {
	mu.Lock()
	defer mu.Unlock()
	if rnd == nil {
		rand.Shuffle(n, swap)
		return
	}
	rnd.Shuffle(n, swap)
}

// String is n characters drawn from alphabet.
func String(n int, alphabet string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[IntN(len(alphabet))]
	}
	return string(b)
}
