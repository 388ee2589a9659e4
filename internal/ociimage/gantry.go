package ociimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Source says what to build Gantry's images from.
type Source struct {
	Root    string // the repository
	Version string // main.version of the binaries
	// Revision is the commit (a label); Created its time
	// (SOURCE_DATE_EPOCH): the time of every file and of the image.
	Revision string
	Created  time.Time
	// CACerts is the CA bundle the images trust (PEM); LibC names the C
	// library the agent's image carries, for its label.
	CACerts []byte
	LibC    string
}

// FromRepo fills a Source from the repository at root: its described
// version, HEAD's commit and commit time (or SOURCE_DATE_EPOCH when set),
// the machine's CA bundle and its glibc package version.
func FromRepo(ctx context.Context, root string) (Source, error) {
	s := Source{Root: root}
	git := func(args ...string) string {
		out, _ := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...).Output()
		return strings.TrimSpace(string(out))
	}
	s.Version, s.Revision = git("describe", "--tags", "--always", "--dirty"), git("rev-parse", "HEAD")
	if s.Version == "" {
		s.Version = "dev"
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		epoch = git("log", "-1", "--format=%ct")
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return s, fmt.Errorf("the source's time: SOURCE_DATE_EPOCH or git log: %q", epoch)
	}
	s.Created = time.Unix(sec, 0).UTC()
	if s.CACerts, err = os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err != nil {
		return s, fmt.Errorf("the CA bundle the images trust (apt-get install ca-certificates): %w", err)
	}
	out, _ := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Version}", "libc6").Output()
	s.LibC = "glibc " + strings.TrimSpace(string(out))
	return s, nil
}

// Images are Gantry's two images.
type Images struct {
	Server v1.Image // cmd/gantry, pure Go, on the minimal base
	Agent  v1.Image // cmd/gantry-agent, cgo (NVML), on the base with glibc
}

// BuildGantry compiles Gantry's binaries into dir and makes their images.
func BuildGantry(ctx context.Context, s Source, dir string) (Images, error) {
	b, err := Compile(ctx, s, dir)
	if err != nil {
		return Images{}, err
	}
	return GantryImages(s, b)
}

// Binaries are Gantry's two programs, compiled, with the C libraries the
// agent loads.
type Binaries struct {
	Server, Agent []byte
	AgentLibs     []File
}

// Compile builds the server (CGO_ENABLED=0) and the agent (cgo) reproducibly
// (-trimpath, no build id, no VCS stamp) into dir.
func Compile(ctx context.Context, s Source, dir string) (Binaries, error) {
	ldflags := "-s -w -buildid= -X main.version=" + s.Version
	build := func(out, pkg string, cgo bool) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, pkg)
		cmd.Dir = s.Root
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+map[bool]string{true: "1", false: "0"}[cgo], "GOOS=linux", "GOARCH=amd64")
		if cgo {
			cmd.Env = append(cmd.Env, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
		}
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
		}
		return os.ReadFile(out)
	}
	server, err := build(filepath.Join(dir, "gantry"), "./cmd/gantry", false)
	if err != nil {
		return Binaries{}, err
	}
	agentPath := filepath.Join(dir, "gantry-agent")
	agent, err := build(agentPath, "./cmd/gantry-agent", true)
	if err != nil {
		return Binaries{}, err
	}
	libs, err := sharedLibraries(ctx, agentPath)
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{Server: server, Agent: agent, AgentLibs: libs}, nil
}

// GantryImages lays the binaries on their bases: the server on the minimal
// one, the agent on it with its C libraries.
func GantryImages(s Source, b Binaries) (Images, error) {
	var err error
	labels := func(title, libc string) map[string]string {
		l := map[string]string{
			"org.opencontainers.image.title":    title,
			"org.opencontainers.image.source":   "https://github.com/gantryhq/gantry",
			"org.opencontainers.image.version":  s.Version,
			"org.opencontainers.image.revision": s.Revision,
			"org.opencontainers.image.created":  s.Created.Format(time.RFC3339),
		}
		if libc != "" {
			l["dev.gantry.libc"] = libc
		}
		return l
	}
	user := fmt.Sprintf("%d:%d", NonrootUID, NonrootUID)
	var out Images
	if out.Server, err = Build(Spec{
		Layers:     [][]File{Base(s.CACerts), {{Path: "/usr/local/bin/gantry", Data: b.Server, Mode: 0o755}}},
		Entrypoint: []string{"/usr/local/bin/gantry"}, Cmd: []string{"serve"}, User: user, WorkingDir: "/home/nonroot",
		Labels: labels("gantry", ""), Created: s.Created,
	}); err != nil {
		return out, fmt.Errorf("the server's image: %w", err)
	}
	// The NVIDIA container toolkit mounts libnvidia-ml.so.1 into the
	// multiarch directory; NVML is opened from there.
	if out.Agent, err = Build(Spec{
		Layers:     [][]File{Base(s.CACerts), b.AgentLibs, {{Path: "/usr/local/bin/gantry-agent", Data: b.Agent, Mode: 0o755}}},
		Entrypoint: []string{"/usr/local/bin/gantry-agent"}, User: user, WorkingDir: "/home/nonroot",
		Env:    []string{"LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/usr/lib64:/usr/local/nvidia/lib64"},
		Labels: labels("gantry-agent", s.LibC), Created: s.Created,
	}); err != nil {
		return out, fmt.Errorf("the agent's image: %w", err)
	}
	return out, nil
}

// lddLine is one library ldd resolved: "libc.so.6 => /lib/…/libc.so.6 (0x…)"
// or the loader "/lib64/ld-linux-x86-64.so.2 (0x…)".
var lddLine = regexp.MustCompile(`(?m)^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$`)

// sharedLibraries are the C libraries a dynamically linked binary loads
// (what ldd resolves), each at the path the binary asks for, with the
// content of the file it resolves to.
func sharedLibraries(ctx context.Context, binary string) ([]File, error) {
	out, err := exec.CommandContext(ctx, "ldd", binary).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", binary, err)
	}
	var files []File
	seen := map[string]bool{}
	for _, m := range lddLine.FindAllSubmatch(out, -1) {
		p := string(m[1])
		if seen[p] {
			continue
		}
		seen[p] = true
		data, err := os.ReadFile(p) // follows links: the file itself
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: p, Data: data, Mode: 0o755})
	}
	if !bytes.Contains(out, []byte("libc.so")) {
		return nil, fmt.Errorf("ldd %s names no C library: %s", binary, out)
	}
	// What NVML (mounted at run time by the NVIDIA container toolkit) links
	// besides libc: beside libc, where this machine has them.
	var libcDir string
	for _, f := range files {
		if strings.Contains(filepath.Base(f.Path), "libc.so") {
			libcDir = filepath.Dir(f.Path)
		}
	}
	for _, so := range []string{"libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"} {
		p := filepath.Join(libcDir, so)
		if seen[p] {
			continue
		}
		if data, err := os.ReadFile(p); err == nil {
			files = append(files, File{Path: p, Data: data, Mode: 0o755})
			seen[p] = true
		}
	}
	return files, nil
}
