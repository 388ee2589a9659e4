package ociimage

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// BusyBoxPath is where Debian's busybox-static puts its binary.
const BusyBoxPath = "/bin/busybox"

// BusyBoxFiles is one layer of a static busybox binary (at /bin/busybox)
// and a link in /bin for each of its tools, with a /tmp anyone may write:
// an image that runs a shell and the usual tools with nothing else in it.
func BusyBoxFiles(binary string) ([]File, error) {
	if err := static(binary); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("busybox: %w", err)
	}
	out, err := exec.Command(binary, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", binary, err)
	}
	files := []File{{Path: "/bin/busybox", Data: data, Mode: 0o755}, {Path: "/tmp", Dir: true, Mode: 0o1777}}
	for _, tool := range strings.Fields(string(out)) {
		if tool != "busybox" && !strings.Contains(tool, "/") {
			files = append(files, File{Path: "/bin/" + tool, Link: "busybox"})
		}
	}
	return files, nil
}

// BusyBox is an image of files (BusyBoxFiles) that runs entrypoint (or a
// shell), stamped at the Unix epoch so that the same binary gives the same
// digest.
func BusyBox(files []File, entrypoint ...string) (v1.Image, error) {
	s := Spec{Layers: [][]File{files}, Env: []string{"PATH=/bin"}, Created: time.Unix(0, 0).UTC()}
	if len(entrypoint) > 0 {
		s.Entrypoint = entrypoint
	} else {
		s.Cmd = []string{"/bin/sh"}
	}
	return Build(s)
}

// static checks that path is a statically linked executable: it runs in an
// image with nothing else.
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w (Debian: apt-get install busybox-static)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (Debian: apt-get install busybox-static)", path)
		}
	}
	return nil
}
