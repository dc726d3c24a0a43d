package promql

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Labels are a series' labels, __name__ included.
type Labels map[string]string

// Sample is one series' current value.
type Sample struct {
	Labels Labels
	Value  float64
}

// Value is a query result: a scalar, or an instant vector.
type Value struct {
	IsScalar bool
	Scalar   float64
	Vector   []Sample
}

// Eval evaluates a parsed query over the samples present now.
func Eval(n Node, data []Sample) (Value, error) {
	e := &evaluator{data: data}
	return e.eval(n)
}

// Query parses and evaluates.
func Query(q string, data []Sample) (Value, error) {
	n, err := Parse(q)
	if err != nil {
		return Value{}, err
	}
	return Eval(n, data)
}

type evaluator struct{ data []Sample }

func (e *evaluator) eval(n Node) (Value, error) {
	switch n := n.(type) {
	case numberLit:
		return Value{IsScalar: true, Scalar: n.v}, nil
	case paren:
		return e.eval(n.expr)
	case selector:
		return Value{Vector: e.selectSamples(n)}, nil
	case aggregate:
		return e.aggregate(n)
	case call:
		return e.call(n)
	case *binary:
		return e.binary(n)
	}
	return Value{}, fmt.Errorf("cannot evaluate %T", n)
}

func (e *evaluator) selectSamples(s selector) []Sample {
	var out []Sample
	for _, d := range e.data {
		if s.name != "" && d.Labels["__name__"] != s.name {
			continue
		}
		ok := true
		for _, m := range s.matchers {
			v := d.Labels[m.name] // an absent label is the empty string
			switch m.op {
			case "=":
				ok = ok && v == m.value
			case "!=":
				ok = ok && v != m.value
			case "=~":
				ok = ok && m.re.MatchString(v)
			case "!~":
				ok = ok && !m.re.MatchString(v)
			}
		}
		if ok {
			out = append(out, Sample{Labels: copyLabels(d.Labels), Value: d.Value})
		}
	}
	return out
}

func copyLabels(l Labels) Labels {
	out := make(Labels, len(l))
	for k, v := range l {
		out[k] = v
	}
	return out
}

func dropName(l Labels) Labels {
	out := copyLabels(l)
	delete(out, "__name__")
	return out
}

// signature identifies a label set restricted (on) or reduced
// (ignoring, always without __name__).
func signature(l Labels, names []string, on bool) string {
	keys := make([]string, 0, len(l))
	if on {
		keys = append(keys, names...)
	} else {
		skip := map[string]bool{"__name__": true}
		for _, n := range names {
			skip[n] = true
		}
		for k := range l {
			if !skip[k] {
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q,", k, l[k])
	}
	return b.String()
}

func (e *evaluator) aggregate(a aggregate) (Value, error) {
	in, err := e.eval(a.expr)
	if err != nil {
		return Value{}, err
	}
	if in.IsScalar {
		return Value{}, fmt.Errorf("%s expects an instant vector, got a scalar", a.op)
	}
	type group struct {
		labels Labels
		vals   []float64
	}
	groups := map[string]*group{}
	var order []string
	for _, s := range in.Vector {
		l := Labels{}
		if a.without {
			l = dropName(s.Labels)
			for _, g := range a.grouping {
				delete(l, g)
			}
		} else {
			for _, g := range a.grouping {
				if v, ok := s.Labels[g]; ok && v != "" {
					l[g] = v
				}
			}
		}
		key := signature(l, nil, false)
		g, ok := groups[key]
		if !ok {
			g = &group{labels: l}
			groups[key] = g
			order = append(order, key)
		}
		g.vals = append(g.vals, s.Value)
	}
	out := Value{}
	for _, k := range order {
		g := groups[k]
		var v float64
		switch a.op {
		case "sum", "avg":
			for _, x := range g.vals {
				v += x
			}
			if a.op == "avg" {
				v /= float64(len(g.vals))
			}
		case "min":
			v = math.Inf(1)
			for _, x := range g.vals {
				v = math.Min(v, x)
			}
		case "max":
			v = math.Inf(-1)
			for _, x := range g.vals {
				v = math.Max(v, x)
			}
		case "count":
			v = float64(len(g.vals))
		case "group":
			v = 1
		}
		out.Vector = append(out.Vector, Sample{Labels: g.labels, Value: v})
	}
	return out, nil
}

func (e *evaluator) call(c call) (Value, error) {
	arg, err := e.eval(c.args[0])
	if err != nil {
		return Value{}, err
	}
	switch c.fn {
	case "vector":
		if !arg.IsScalar {
			return Value{}, errors.New("vector() expects a scalar")
		}
		return Value{Vector: []Sample{{Labels: Labels{}, Value: arg.Scalar}}}, nil
	case "absent":
		if arg.IsScalar {
			return Value{}, errors.New("absent() expects an instant vector")
		}
		if len(arg.Vector) > 0 {
			return Value{}, nil
		}
		l := Labels{}
		if s, ok := c.args[0].(selector); ok {
			for _, m := range s.matchers {
				if m.op == "=" {
					l[m.name] = m.value
				}
			}
		}
		return Value{Vector: []Sample{{Labels: l, Value: 1}}}, nil
	}
	return Value{}, fmt.Errorf("function %q is not supported", c.fn)
}

func arith(op string, a, b float64) (float64, bool) {
	switch op {
	case "+":
		return a + b, true
	case "-":
		return a - b, true
	case "*":
		return a * b, true
	case "/":
		return a / b, true
	case "%":
		return math.Mod(a, b), true
	case "==":
		return a, a == b
	case "!=":
		return a, a != b
	case ">":
		return a, a > b
	case "<":
		return a, a < b
	case ">=":
		return a, a >= b
	case "<=":
		return a, a <= b
	}
	return 0, false
}

func isComparison(op string) bool {
	switch op {
	case "==", "!=", ">", "<", ">=", "<=":
		return true
	}
	return false
}

func (e *evaluator) binary(b *binary) (Value, error) {
	l, err := e.eval(b.lhs)
	if err != nil {
		return Value{}, err
	}
	r, err := e.eval(b.rhs)
	if err != nil {
		return Value{}, err
	}
	switch b.op {
	case "or", "and", "unless":
		if l.IsScalar || r.IsScalar {
			return Value{}, fmt.Errorf("%s needs instant vectors on both sides", b.op)
		}
		return e.setOp(b, l.Vector, r.Vector), nil
	}
	if isComparison(b.op) && l.IsScalar && r.IsScalar && !b.returnBool {
		return Value{}, errors.New("comparisons between scalars must use the bool modifier")
	}
	apply := func(x, y float64) (float64, bool) {
		v, keep := arith(b.op, x, y)
		if !isComparison(b.op) {
			return v, true
		}
		if b.returnBool {
			if keep {
				return 1, true
			}
			return 0, true
		}
		return v, keep
	}
	switch {
	case l.IsScalar && r.IsScalar:
		v, _ := apply(l.Scalar, r.Scalar)
		return Value{IsScalar: true, Scalar: v}, nil
	case l.IsScalar || r.IsScalar:
		vec, sc := l.Vector, r.Scalar
		if l.IsScalar {
			vec, sc = r.Vector, l.Scalar
		}
		var out []Sample
		for _, s := range vec {
			x, y := s.Value, sc
			if l.IsScalar {
				x, y = sc, s.Value
			}
			v, keep := apply(x, y)
			if !keep {
				continue
			}
			if isComparison(b.op) && !b.returnBool {
				v = s.Value
			}
			labels := s.Labels
			if !isComparison(b.op) || b.returnBool {
				labels = dropName(labels)
			}
			out = append(out, Sample{Labels: labels, Value: v})
		}
		return Value{Vector: out}, nil
	}
	// Vector to vector, one to one on the matching labels.
	right := map[string]Sample{}
	for _, s := range r.Vector {
		key := signature(s.Labels, b.matching, b.on)
		if _, dup := right[key]; dup {
			return Value{}, fmt.Errorf("many-to-many matching not allowed: the right-hand side has several series for %s", key)
		}
		right[key] = s
	}
	var out []Sample
	seen := map[string]bool{}
	for _, s := range l.Vector {
		key := signature(s.Labels, b.matching, b.on)
		rs, ok := right[key]
		if !ok {
			continue
		}
		if seen[key] {
			return Value{}, fmt.Errorf("many-to-many matching not allowed: the left-hand side has several series for %s", key)
		}
		seen[key] = true
		v, keep := apply(s.Value, rs.Value)
		if !keep {
			continue
		}
		labels := dropName(s.Labels)
		if b.on {
			kept := Labels{}
			for _, n := range b.matching {
				if v, ok := s.Labels[n]; ok {
					kept[n] = v
				}
			}
			labels = kept
		} else {
			for _, n := range b.matching {
				delete(labels, n)
			}
		}
		if isComparison(b.op) && !b.returnBool {
			labels = s.Labels
		}
		out = append(out, Sample{Labels: labels, Value: v})
	}
	return Value{Vector: out}, nil
}

// setOp applies or, and and unless on the matching labels (all but
// __name__ unless on/ignoring say otherwise).
func (e *evaluator) setOp(b *binary, l, r []Sample) Value {
	rightKeys := map[string]bool{}
	for _, s := range r {
		rightKeys[signature(s.Labels, b.matching, b.on)] = true
	}
	var out []Sample
	switch b.op {
	case "and":
		for _, s := range l {
			if rightKeys[signature(s.Labels, b.matching, b.on)] {
				out = append(out, s)
			}
		}
	case "unless":
		for _, s := range l {
			if !rightKeys[signature(s.Labels, b.matching, b.on)] {
				out = append(out, s)
			}
		}
	case "or":
		leftKeys := map[string]bool{}
		for _, s := range l {
			leftKeys[signature(s.Labels, b.matching, b.on)] = true
			out = append(out, s)
		}
		for _, s := range r {
			if !leftKeys[signature(s.Labels, b.matching, b.on)] {
				out = append(out, s)
			}
		}
	}
	return Value{Vector: out}
}
