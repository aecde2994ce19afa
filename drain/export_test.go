package drain

import "time"

// SetBudgetTurn sets d's turn when a budget frees: first for a drain that
// has not waited, falling by e every decay waited. Tests widen it so that
// the order they check is not a race against the server's jitter.
func SetBudgetTurn(d *Drainer, first, decay time.Duration) {
	d.budgets.first, d.budgets.decay = first, decay
}
