//go:build !dev

package server

import (
	"context"
	"crypto/rsa"
	"errors"
	"log/slog"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imageverify"
)

// DevBuild reports whether this binary carries development mode: the
// in-process OpenID provider and the local signed image registry. This one
// does not (build with -tags dev for them).
const DevBuild = false

// devProvider is the development OpenID provider (none in this build).
type devProvider interface {
	Issuer() string
	Subject(username string) string
}

func devSignIn(context.Context, config.Config, string, *rsa.PrivateKey, *slog.Logger) (config.OIDC, devProvider, error) {
	return config.OIDC{}, nil, errors.New("oidc.issuer is not set, and this gantry is a production build without the development sign-in: " +
		"configure your OpenID provider (oidc.issuer, oidc.clientID, …), or build with -tags dev (make dev and make serve do)")
}

func devImages(context.Context, *imagecat.Catalog, imageverify.Options, string, *slog.Logger) (*imageverify.Images, error) {
	return nil, errors.New("images.devRegistry is set, and this gantry is a production build without the development registry: build with -tags dev (make dev and make serve do)")
}

// devCheckpointKey: this build has no development checkpoint key.
func devCheckpointKey(string, *slog.Logger) (string, error) { return "", nil }

// DevToken is the development build's (devmode.go): a production build has
// no development users to make a token for.
func (s *Server) DevToken(context.Context, string) (string, error) {
	return "", errors.New("no development provider in a production build: sign in and create a token in the portal")
}
