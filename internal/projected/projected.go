// Package projected owns reading a projected ServiceAccount token's claims
// without verifying it: its audiences, its expiry and the pod it is bound
// to. The cluster verifies a token (a TokenReview); this only decides
// whether one is worth asking about, so that anyone who can send a bearer
// token cannot make Gantry ask the API server about anything.
package projected

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
)

// Claims are what a token says of itself.
type Claims struct {
	Audiences []string
	Expiry    time.Time // zero: none said
	Pod       string    // the pod it is bound to ("" when none)
	Namespace string    // the namespace of its ServiceAccount ("" when not said)
}

// ErrNotJWT means the token is not a JWT whose claims can be read.
var ErrNotJWT = errors.New("not a JWT")

// Peek reads a token's claims, unverified.
func Peek(token string) (Claims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Claims{}, ErrNotJWT
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return Claims{}, ErrNotJWT
	}
	var raw struct {
		Aud        any   `json:"aud"`
		Exp        int64 `json:"exp"`
		Kubernetes struct {
			Namespace string `json:"namespace"`
			Pod       struct {
				Name string `json:"name"`
			} `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &raw) != nil {
		return Claims{}, ErrNotJWT
	}
	c := Claims{Pod: raw.Kubernetes.Pod.Name, Namespace: raw.Kubernetes.Namespace}
	switch v := raw.Aud.(type) {
	case string:
		c.Audiences = []string{v}
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				c.Audiences = append(c.Audiences, s)
			}
		}
	}
	if raw.Exp != 0 {
		c.Expiry = time.Unix(raw.Exp, 0)
	}
	return c, nil
}

// For says whether the claims name audience.
func (c Claims) For(audience string) bool { return slices.Contains(c.Audiences, audience) }

// Live says whether the token has an expiry and it is after now.
func (c Claims) Live(now time.Time) bool { return !c.Expiry.IsZero() && c.Expiry.After(now) }
