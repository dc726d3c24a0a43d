// Package promql evaluates instant PromQL queries over the metrics a
// capstan process has now: the subset update risks are written in —
// selectors with label matchers, sum/min/max/avg/count/group by or
// without, the set operators or/and/unless, arithmetic and comparisons
// (with bool, on and ignoring), vector() and absent(). Anything else is
// refused with an error naming it, never evaluated wrongly.
package promql

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

type tokenKind int

const (
	tEOF tokenKind = iota
	tIdent
	tNumber
	tString
	tPunct // ( ) { } , and operators
)

type token struct {
	kind tokenKind
	text string
	pos  int
}

func lex(q string) ([]token, error) {
	var out []token
	i := 0
	for i < len(q) {
		c := rune(q[i])
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '#':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			var b strings.Builder
			for j < len(q) && rune(q[j]) != c {
				if q[j] == '\\' && c != '`' && j+1 < len(q) {
					j++
				}
				b.WriteByte(q[j])
				j++
			}
			if j >= len(q) {
				return nil, fmt.Errorf("unterminated string at position %d", i)
			}
			out = append(out, token{tString, b.String(), i})
			i = j + 1
		case unicode.IsDigit(c) || (c == '.' && i+1 < len(q) && unicode.IsDigit(rune(q[i+1]))):
			j := i
			for j < len(q) && (unicode.IsDigit(rune(q[j])) || q[j] == '.' || q[j] == 'e' || q[j] == 'E' ||
				((q[j] == '+' || q[j] == '-') && (q[j-1] == 'e' || q[j-1] == 'E'))) {
				j++
			}
			out = append(out, token{tNumber, q[i:j], i})
			i = j
		case unicode.IsLetter(c) || c == '_' || c == ':':
			j := i
			for j < len(q) && (unicode.IsLetter(rune(q[j])) || unicode.IsDigit(rune(q[j])) || q[j] == '_' || q[j] == ':') {
				j++
			}
			out = append(out, token{tIdent, q[i:j], i})
			i = j
		default:
			two := ""
			if i+1 < len(q) {
				two = q[i : i+2]
			}
			switch two {
			case "==", "!=", ">=", "<=", "=~", "!~":
				out = append(out, token{tPunct, two, i})
				i += 2
				continue
			}
			if strings.ContainsRune("(){}[],+-*/%^<>=", c) {
				out = append(out, token{tPunct, string(c), i})
				i++
				continue
			}
			return nil, fmt.Errorf("unexpected character %q at position %d", c, i)
		}
	}
	return append(out, token{tEOF, "", len(q)}), nil
}

// Node is a parsed expression.
type Node interface{ node() }

type numberLit struct{ v float64 }

type matcher struct {
	name, op, value string
	re              *regexp.Regexp
}

type selector struct {
	name     string
	matchers []matcher
}

type aggregate struct {
	op       string
	grouping []string
	without  bool
	expr     Node
}

type binary struct {
	op         string
	lhs, rhs   Node
	returnBool bool
	on         bool
	matching   []string // on(...) or ignoring(...) labels
	hasMatch   bool
}

type call struct {
	fn   string
	args []Node
}

type paren struct{ expr Node }

func (numberLit) node() {}
func (selector) node()  {}
func (aggregate) node() {}
func (binary) node()    {}
func (call) node()      {}
func (paren) node()     {}

type parser struct {
	toks []token
	i    int
}

// Parse reads a query of the supported subset.
func Parse(q string) (Node, error) {
	toks, err := lex(q)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	n, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, fmt.Errorf("unexpected %q at position %d", t.text, t.pos)
	}
	return n, nil
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) expect(text string) error {
	if t := p.next(); t.text != text || (t.kind != tPunct && t.kind != tIdent) {
		return fmt.Errorf("expected %q at position %d, found %q", text, t.pos, t.text)
	}
	return nil
}

// Binary operator precedence, lowest first, as PromQL's.
var precedence = map[string]int{
	"or": 1, "and": 2, "unless": 2,
	"==": 3, "!=": 3, "<=": 3, "<": 3, ">=": 3, ">": 3,
	"+": 4, "-": 4,
	"*": 5, "/": 5, "%": 5,
}

func binaryOp(t token) (string, bool) {
	if t.kind == tIdent && (t.text == "or" || t.text == "and" || t.text == "unless") {
		return t.text, true
	}
	if t.kind == tPunct {
		if _, ok := precedence[t.text]; ok {
			return t.text, true
		}
		if t.text == "^" {
			return "^", true
		}
	}
	return "", false
}

func (p *parser) expr(minPrec int) (Node, error) {
	lhs, err := p.unary()
	if err != nil {
		return nil, err
	}
	for {
		op, ok := binaryOp(p.peek())
		if !ok {
			return lhs, nil
		}
		if op == "^" {
			return nil, fmt.Errorf("the operator ^ is not supported")
		}
		prec := precedence[op]
		if prec < minPrec {
			return lhs, nil
		}
		p.next()
		b := &binary{op: op}
		if p.peek().kind == tIdent && p.peek().text == "bool" {
			p.next()
			b.returnBool = true
		}
		if t := p.peek(); t.kind == tIdent && (t.text == "on" || t.text == "ignoring") {
			p.next()
			b.on, b.hasMatch = t.text == "on", true
			if b.matching, err = p.labelList(); err != nil {
				return nil, err
			}
		}
		if t := p.peek(); t.kind == tIdent && (t.text == "group_left" || t.text == "group_right") {
			return nil, fmt.Errorf("%s is not supported", t.text)
		}
		rhs, err := p.expr(prec + 1)
		if err != nil {
			return nil, err
		}
		b.lhs, b.rhs = lhs, rhs
		lhs = b
	}
}

var aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "count": true, "group": true}

func (p *parser) unary() (Node, error) {
	t := p.peek()
	switch {
	case t.kind == tPunct && (t.text == "-" || t.text == "+"):
		p.next()
		n, err := p.unary()
		if err != nil {
			return nil, err
		}
		if t.text == "-" {
			return &binary{op: "*", lhs: numberLit{-1}, rhs: n}, nil
		}
		return n, nil
	case t.kind == tPunct && t.text == "(":
		p.next()
		n, err := p.expr(0)
		if err != nil {
			return nil, err
		}
		return paren{n}, p.expect(")")
	case t.kind == tNumber:
		p.next()
		v, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return nil, fmt.Errorf("bad number %q at position %d", t.text, t.pos)
		}
		return numberLit{v}, nil
	case t.kind == tPunct && t.text == "{":
		return p.selector("")
	case t.kind == tIdent && aggregations[t.text]:
		return p.aggregate()
	case t.kind == tIdent && p.toks[p.i+1].text == "(" && p.toks[p.i+1].kind == tPunct:
		return p.call()
	case t.kind == tIdent:
		p.next()
		return p.selector(t.text)
	}
	return nil, fmt.Errorf("unexpected %q at position %d", t.text, t.pos)
}

func (p *parser) labelList() ([]string, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var out []string
	for p.peek().text != ")" {
		t := p.next()
		if t.kind != tIdent {
			return nil, fmt.Errorf("expected a label name at position %d, found %q", t.pos, t.text)
		}
		out = append(out, t.text)
		if p.peek().text == "," {
			p.next()
		}
	}
	p.next()
	return out, nil
}

func (p *parser) selector(name string) (Node, error) {
	s := selector{name: name}
	if p.peek().text == "{" && p.peek().kind == tPunct {
		p.next()
		for p.peek().text != "}" {
			l := p.next()
			if l.kind != tIdent {
				return nil, fmt.Errorf("expected a label name at position %d, found %q", l.pos, l.text)
			}
			op := p.next()
			switch op.text {
			case "=", "!=", "=~", "!~":
			default:
				return nil, fmt.Errorf("expected a label matcher operator at position %d, found %q", op.pos, op.text)
			}
			v := p.next()
			if v.kind != tString {
				return nil, fmt.Errorf("expected a string at position %d, found %q", v.pos, v.text)
			}
			m := matcher{name: l.text, op: op.text, value: v.text}
			if op.text == "=~" || op.text == "!~" {
				re, err := regexp.Compile("^(?:" + v.text + ")$")
				if err != nil {
					return nil, fmt.Errorf("label matcher %s%s%q: %v", l.text, op.text, v.text, err)
				}
				m.re = re
			}
			if l.text == "__name__" && op.text == "=" {
				s.name = v.text
			} else {
				s.matchers = append(s.matchers, m)
			}
			if p.peek().text == "," {
				p.next()
			}
		}
		p.next()
	}
	if t := p.peek(); t.kind == tPunct && t.text == "[" {
		return nil, fmt.Errorf("range selectors are not supported (instant queries only)")
	}
	if t := p.peek(); t.kind == tIdent && t.text == "offset" {
		return nil, fmt.Errorf("offset is not supported")
	}
	if s.name == "" && len(s.matchers) == 0 {
		return nil, fmt.Errorf("a vector selector must name a metric or have a matcher")
	}
	return s, nil
}

func (p *parser) aggregate() (Node, error) {
	a := aggregate{op: p.next().text}
	var err error
	grouping := func() error {
		if t := p.peek(); t.kind == tIdent && (t.text == "by" || t.text == "without") {
			p.next()
			a.without = t.text == "without"
			a.grouping, err = p.labelList()
			return err
		}
		return nil
	}
	if err := grouping(); err != nil {
		return nil, err
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	if a.expr, err = p.expr(0); err != nil {
		return nil, err
	}
	if p.peek().text == "," {
		return nil, fmt.Errorf("%s takes one argument", a.op)
	}
	if err := p.expect(")"); err != nil {
		return nil, err
	}
	if a.grouping == nil && !a.without {
		if err := grouping(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (p *parser) call() (Node, error) {
	fn := p.next()
	c := call{fn: fn.text}
	switch fn.text {
	case "vector", "absent":
	default:
		return nil, fmt.Errorf("function %q is not supported", fn.text)
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	for p.peek().text != ")" {
		n, err := p.expr(0)
		if err != nil {
			return nil, err
		}
		c.args = append(c.args, n)
		if p.peek().text == "," {
			p.next()
		}
	}
	p.next()
	if len(c.args) != 1 {
		return nil, fmt.Errorf("%s takes one argument, got %d", fn.text, len(c.args))
	}
	return c, nil
}
