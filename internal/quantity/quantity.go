// Package quantity owns reading Kubernetes resource quantities ("64Gi",
// "500m", "1e3") from untrusted text — template files, parameter values, API
// bodies — within bounds, before any arithmetic: apimachinery's parser turns
// a decimal exponent into math/big arithmetic, and "1E8000000000" spins a
// core for minutes.
package quantity

import (
	"fmt"
	"regexp"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Bounds on what Parse reads.
const (
	MaxLen      = 32 // characters
	MaxExponent = 24 // |n| in a decimal exponent (e/E n)
)

// shape splits a quantity into its number and its suffix (a binary or
// decimal SI suffix, or a decimal exponent).
var shape = regexp.MustCompile(`^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)$`)

var exponent = regexp.MustCompile(`^[eE]([+-]?[0-9]+)$`)

// Parse reads s as a quantity, refusing what is too long or has a decimal
// exponent beyond MaxExponent before the arithmetic starts.
func Parse(s string) (resource.Quantity, error) {
	if len(s) > MaxLen {
		return resource.Quantity{}, fmt.Errorf("%.40q is longer than %d characters", s, MaxLen)
	}
	m := shape.FindStringSubmatch(s)
	if m == nil {
		return resource.Quantity{}, fmt.Errorf("%q is not a quantity", s)
	}
	if e := exponent.FindStringSubmatch(m[1]); e != nil {
		n, err := strconv.Atoi(e[1])
		if err != nil || n > MaxExponent || n < -MaxExponent {
			return resource.Quantity{}, fmt.Errorf("%q has an exponent beyond ±%d", s, MaxExponent)
		}
	}
	return resource.ParseQuantity(s)
}
