package resolve

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// The bounds of a regular expression in allow-tags or ignore-tags, checked when the
// policy is read. Go's regular expressions match in time linear in the input, but
// the factor is the compiled program's size: a short expression with counted
// repetitions ((a*b){500}) compiles to thousands of instructions, each tried at
// every byte of every tag.
const (
	// MaxFilterSource is the most bytes an expression may have.
	MaxFilterSource = 1024
	// MaxFilterInsts is the most instructions its compiled program may have.
	MaxFilterInsts = 2000
)

// filterSizeAccepted says what compileFilter accepts, for messages.
var filterSizeAccepted = fmt.Sprintf("a regular expression (Go RE2 syntax) of at most %d bytes that compiles to at most %d instructions",
	MaxFilterSource, MaxFilterInsts)

// compileFilter compiles the expression of value (regexp:EXPR) of a filter field,
// refusing one too big in itself.
func compileFilter(field PolicyField, value, accepted string) (TagMatcher, error) {
	expr := strings.TrimPrefix(value, "regexp:")
	bad := func(err error) error {
		return &InputError{Field: string(field), Policy: field, Value: value, Accepted: accepted, Err: err}
	}
	if len(expr) > MaxFilterSource {
		return nil, &InputError{Field: string(field), Policy: field, Value: value, Accepted: filterSizeAccepted,
			Err: fmt.Errorf("the expression has %d bytes", len(expr))}
	}
	insts, err := progSize(expr)
	if err != nil {
		return nil, bad(err)
	}
	if insts > MaxFilterInsts {
		return nil, &InputError{Field: string(field), Policy: field, Value: value, Accepted: filterSizeAccepted,
			Err: fmt.Errorf("the expression compiles to %d instructions", insts)}
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, bad(err)
	}
	return regexpMatcher{re: re, insts: insts}, nil
}

// progSize is the number of instructions of expr's program, compiled as
// regexp.Compile compiles it (Perl syntax, simplified).
func progSize(expr string) (int, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}
