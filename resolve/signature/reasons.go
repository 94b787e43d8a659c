package signature

import (
	"fmt"
	"time"
)

type timeT = time.Time

// Priorities of skip reasons: the most telling one is reported.
const (
	prioAttestation = iota + 1 // only attestations were found
	prioMalformed              // malformed or missing signature data
	prioOther                  // for another image, does not verify
	prioIdentity               // signed by someone else
	prioCap                    // over a cap: the operator should know
)

// reasons collects why the signatures found do not satisfy a requirement.
type reasons struct {
	best  string
	prio  int
	count int
}

func (r *reasons) add(prio int, reason string) {
	r.count++
	if prio > r.prio {
		r.best, r.prio = reason, prio
	}
}

// String is the reason reported: "unsigned" when nothing was found.
func (r *reasons) String() string {
	switch {
	case r.count == 0:
		return "unsigned"
	case r.count == 1:
		return r.best
	}
	return fmt.Sprintf("%s (and %d more that do not qualify)", r.best, r.count-1)
}
