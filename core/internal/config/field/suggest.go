package field

// Suggest returns the name of names closest to given, a misspelt key or
// field name, when it is within edit distance 2 (the first such name in
// the order given on a tie); "" when none is. Names longer than 64 bytes
// are never suggested nor compared, so a hostile key costs nothing.
func Suggest(given string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := levenshtein(given, n, bestD); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// levenshtein is the edit distance of a and b, or limit when either is
// longer than 64 bytes.
func levenshtein(a, b string, limit int) int {
	if len(a) > 64 || len(b) > 64 {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
