package admit

import "fmt"

// Priority is a request's class: a higher one is always dequeued first.
// The zero value is Sheddable: say Standard when that is meant.
type Priority int

// Priorities, lowest first.
const (
	// Sheddable requests never wait: when they cannot be admitted at once
	// they are refused with a Retry-After.
	Sheddable Priority = iota
	Standard
	Critical
	numPriorities = 3
)

var priorityNames = [numPriorities]string{"sheddable", "standard", "critical"}

func (p Priority) String() string {
	if p < 0 || p >= numPriorities {
		return fmt.Sprintf("Priority(%d)", int(p))
	}
	return priorityNames[p]
}

// Priorities lists every priority, lowest first.
func Priorities() []Priority { return []Priority{Sheddable, Standard, Critical} }

// ParsePriority parses "critical", "standard" or "sheddable".
func ParsePriority(s string) (Priority, error) {
	for i, n := range priorityNames {
		if s == n {
			return Priority(i), nil
		}
	}
	return 0, fmt.Errorf("admit: priority %q: want critical, standard or sheddable", s)
}
