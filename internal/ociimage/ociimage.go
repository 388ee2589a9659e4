// Package ociimage owns building Gantry's own container images without a
// container engine, as ko does: files put into reproducible layers (sorted
// entries, fixed owners, modes and times), a config naming the user and the
// entrypoint, and the image written to an OCI layout or pushed to a
// registry. The same inputs give the same digest on every machine.
package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer: a regular file (Data), a directory (Dir)
// or a symbolic link (Link). Path is absolute in the image.
type File struct {
	Path     string
	Data     []byte
	Mode     int64 // permission bits; 0: 0644 for files, 0755 for directories
	Dir      bool
	Link     string
	UID, GID int
}

// Spec is an image: its layers, bottom first, and its config.
type Spec struct {
	Layers     [][]File
	Entrypoint []string
	Cmd        []string
	User       string // uid:gid
	WorkingDir string
	Env        []string
	Labels     map[string]string
	// Created stamps the config, the history and every file: the source's
	// commit time (SOURCE_DATE_EPOCH), so that a rebuild is identical.
	Created time.Time
	OS      string // default linux
	Arch    string // default amd64
}

// Build makes the image of s.
func Build(s Spec) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, files := range s.Layers {
		data, err := layerTar(files, s.Created)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
			tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{
			Created: v1.Time{Time: s.Created}, CreatedBy: "gantry ociimage", Comment: fmt.Sprintf("layer %d", i)}}); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = def(s.OS, "linux"), def(s.Arch, "amd64")
	cf.Created = v1.Time{Time: s.Created}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User = s.Entrypoint, s.Cmd, s.User
	cf.Config.WorkingDir, cf.Config.Env, cf.Config.Labels = s.WorkingDir, s.Env, s.Labels
	return mutate.ConfigFile(img, cf)
}

func def(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// layerTar writes files as a tar: sorted by path, each parent directory
// present, every time at created.
func layerTar(files []File, created time.Time) ([]byte, error) {
	all := map[string]File{}
	for _, f := range files {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			return nil, fmt.Errorf("a file at the root")
		}
		if _, dup := all[p]; dup {
			return nil, fmt.Errorf("%s twice", p)
		}
		f.Path = p
		all[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = File{Path: d, Dir: true}
			}
		}
	}
	names := make([]string, 0, len(all))
	for p := range all {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		f := all[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), ModTime: created.UTC(), Uid: f.UID, Gid: f.GID, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", orMode(f.Mode, 0o755)
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size, h.Mode = tar.TypeReg, int64(len(f.Data)), orMode(f.Mode, 0o644)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func orMode(m, d int64) int64 {
	if m == 0 {
		return d
	}
	return m
}

// NonrootUID is the user Gantry's images run as (distroless's nonroot).
const NonrootUID = 65532

// Base is the files of a minimal base: the nonroot user and group, name
// resolution from files then DNS, a /tmp anyone may write, the nonroot
// user's home, and the CA certificates given (PEM; a server reaches its
// OpenID provider and registries over TLS).
func Base(caCerts []byte) []File {
	return []File{
		{Path: "/etc/passwd", Data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonrootUID, NonrootUID))},
		{Path: "/etc/group", Data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonrootUID))},
		{Path: "/etc/nsswitch.conf", Data: []byte("hosts: files dns\n")},
		{Path: "/etc/ssl/certs/ca-certificates.crt", Data: caCerts},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: NonrootUID, GID: NonrootUID},
	}
}

// Signer signs a pushed image (imagesign.Signer).
type Signer interface {
	Sign(ctx context.Context, img name.Digest, annotations map[string]any, opts ...remote.Option) error
}

// Push writes img to ref and, with a signer, signs it there with
// annotations; it returns the image's digest reference.
func Push(ctx context.Context, img v1.Image, ref name.Tag, signer Signer, annotations map[string]any, opts ...remote.Option) (name.Digest, error) {
	opts = append(opts, remote.WithContext(ctx))
	if err := remote.Write(ref, img, opts...); err != nil {
		return name.Digest{}, fmt.Errorf("push %s: %w", ref, err)
	}
	h, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	d := ref.Context().Digest(h.String())
	if signer != nil {
		if err := signer.Sign(ctx, d, annotations, opts...); err != nil {
			return d, fmt.Errorf("sign %s: %w", d, err)
		}
	}
	return d, nil
}

// WriteLayout writes images to an OCI image layout at dir, each named by
// its ref.name annotation. An earlier layout there is replaced; a directory
// that holds anything else is refused, not emptied.
func WriteLayout(dir string, named map[string]v1.Image) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("%s is not empty and is not an OCI image layout: choose another -out", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(named))
	for n := range named {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := p.AppendImage(named[n], layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": n})); err != nil {
			return fmt.Errorf("write %s: %w", n, err)
		}
	}
	return nil
}
