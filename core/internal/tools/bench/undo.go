package bench

// undo holds what a run split into steps set up, as the functions that
// undo it: each step registers its own with onClose, and the run's close
// runs them the latest first, as the defers of one function would.
type undo []func()

// onClose registers f to run when the run closes, before the functions
// registered earlier.
func (u *undo) onClose(f func()) { *u = append(*u, f) }

// close runs the registered functions, the latest first.
func (u *undo) close() {
	for i := len(*u) - 1; i >= 0; i-- {
		(*u)[i]()
	}
}
