package stats

// JainIndex returns Jain's fairness index of xs, (Σx)² / (n·Σx²): 1 when every
// x is equal, 1/n when one x holds everything. It returns 0 for no values and
// 1 when all values are zero (nothing to be unfair about).
func JainIndex(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// MaxOverMean returns max(xs)/mean(xs); 0 for no values or a zero mean.
func MaxOverMean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum, max float64
	for _, x := range xs {
		sum += x
		if x > max {
			max = x
		}
	}
	if sum == 0 {
		return 0
	}
	return max / (sum / float64(len(xs)))
}

// IdleFraction is the share of a fair share below which a pod counts as idle:
// a pod serving less than 10% of total/n is idle.
const IdleFraction = 0.10

// CountIdle returns how many xs are below IdleFraction of a fair share
// (sum/len). With a zero sum every pod is idle.
func CountIdle(xs []float64) int {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	fair := sum / float64(len(xs))
	n := 0
	for _, x := range xs {
		if x < IdleFraction*fair || sum == 0 {
			n++
		}
	}
	return n
}
