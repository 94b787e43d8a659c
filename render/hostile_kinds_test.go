package render

// hostileKinds maps the kind of each hostile case to the error it wraps (kept apart
// from hostile_test.go so the cases also build against a render without them).
var hostileKinds = map[string]error{
	"outside":  ErrOutsideRepository,
	"special":  ErrNotRegular,
	"remote":   ErrRemote,
	"deadline": ErrDeadline,
}
