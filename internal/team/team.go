// Package team owns team names: what a valid one is, checked once where a
// name enters Gantry (a launch, a preview, a listing's filter), so that the
// domain passes a Name it can trust rather than a string it must check again,
// and budgets and quotas can hang off it.
package team

import (
	"fmt"
	"strings"

	"github.com/gantryhq/gantry/internal/fault"
)

// MaxLen is the longest team name: a DNS label, less room for the namespace
// prefix and the objects' names.
const MaxLen = 40

// Name is a team's name: a lowercase DNS label of at most MaxLen characters.
// Values come from Parse (or from records Gantry wrote).
type Name string

// Parse checks s as a team name; a bad one is a *fault.Invalid at field
// "team".
func Parse(s string) (Name, error) {
	if !valid(s) {
		return "", &fault.Invalid{Fields: []fault.Field{{Path: "team", Message: fmt.Sprintf(
			"%q must be a lowercase DNS label (letters, digits, '-') of at most %d characters", s, MaxLen)}}}
	}
	return Name(s), nil
}

func (n Name) String() string { return string(n) }

func valid(s string) bool {
	if s == "" || len(s) > MaxLen || s[0] == '-' || s[len(s)-1] == '-' || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}
