// Command gantry-images builds Gantry's two container images without a
// container engine (make images): the server, pure Go, on a minimal base
// (the nonroot user, CA certificates, nothing else), and the node agent,
// cgo for NVML, on the same base with the glibc it links. Both are
// reproducible — the same commit gives the same digests on any machine with
// the same Go and glibc — and are written to an OCI image layout, or pushed
// to a registry and signed with cosign's format, as the image catalog's
// images are.
//
//	gantry-images [-out bin/images] [-push REGISTRY/PREFIX [-insecure] [-key cosign.pem]]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/gantryhq/gantry/internal/imagesign"
	"github.com/gantryhq/gantry/internal/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gantry-images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gantry-images", flag.ContinueOnError)
	out := fs.String("out", "bin/images", "the OCI image layout to write")
	push := fs.String("push", "", "push to REGISTRY/PREFIX as PREFIX/gantry:VERSION and PREFIX/gantry-agent:VERSION")
	insecure := fs.Bool("insecure", false, "with -push: the registry speaks plain HTTP")
	keyFile := fs.String("key", "", "with -push: sign both images with this ECDSA key (PEM), cosign's signature format")
	root := fs.String("root", ".", "the repository")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keyFile != "" && *push == "" {
		return fmt.Errorf("-key signs pushed images: give -push too")
	}
	src, err := ociimage.FromRepo(ctx, *root)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "gantry-images")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	imgs, err := ociimage.BuildGantry(ctx, src, tmp)
	if err != nil {
		return err
	}
	named := map[string]v1.Image{"gantry:" + src.Version: imgs.Server, "gantry-agent:" + src.Version: imgs.Agent}
	if err := ociimage.WriteLayout(*out, named); err != nil {
		return err
	}
	for _, n := range []string{"gantry:" + src.Version, "gantry-agent:" + src.Version} {
		d, _ := named[n].Digest()
		fmt.Printf("%s@%s in %s\n", n, d, *out)
	}
	if *push == "" {
		return nil
	}
	var signer ociimage.Signer
	if *keyFile != "" {
		data, err := os.ReadFile(*keyFile)
		if err != nil {
			return err
		}
		key, err := imagesign.ParseKey(data)
		if err != nil {
			return fmt.Errorf("%s: %w", *keyFile, err)
		}
		if signer, err = imagesign.New(key); err != nil {
			return err
		}
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	for _, n := range []string{"gantry:" + src.Version, "gantry-agent:" + src.Version} {
		ref, err := name.NewTag(*push+"/"+n, opts...)
		if err != nil {
			return err
		}
		// Credentials as docker and cosign find them (~/.docker/config.json).
		d, err := ociimage.Push(ctx, named[n], ref, signer, map[string]any{"org.opencontainers.image.revision": src.Revision},
			remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			return err
		}
		fmt.Printf("pushed %s%s\n", d, map[bool]string{true: ", signed"}[signer != nil])
	}
	return nil
}
