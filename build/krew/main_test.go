package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// entry is what a test checks of one archive entry.
type entry struct {
	Name       string
	Mode       int64
	Uid, Gid   int
	Uname      string
	ModTime    int64
	Size       int64
	FirstBytes string
}

// readArchive returns the entries of the .tar.gz at file.
func readArchive(t *testing.T, file string) []entry {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("%s: gzip header has time %v and name %q, want none", file, zr.ModTime, zr.Name)
	}
	var out []entry
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		head := make([]byte, 4)
		n, _ := io.ReadFull(tr, head)
		out = append(out, entry{h.Name, h.Mode, h.Uid, h.Gid, h.Uname + h.Gname, h.ModTime.Unix(), h.Size, string(head[:n])})
	}
}

func sha256File(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestRelease builds linux/amd64 twice: the archives are byte-identical,
// hold only kubectl-pinlab (the repository has no LICENSE) as packed
// reproducibly, and the manifest names them with their sha256.
func TestRelease(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go in PATH")
	}
	if testing.Short() {
		t.Skip("cross-builds a command")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	const name = "kubectl-pinlab_v1.2.3-rc.1_linux_amd64.tar.gz"
	var archives [2][]byte
	var out string
	for i := range archives {
		out = t.TempDir()
		// The agent, not pinlab: the packing is what is tested, and it
		// builds in seconds, not minutes.
		o := options{version: "v1.2.3-rc.1", baseURL: "https://example.com/dl/", out: out, platforms: []platform{{"linux", "amd64"}}, root: root, pkg: "./cmd/pinlab-agent"}
		if err := run(context.Background(), o, io.Discard); err != nil {
			t.Fatal(err)
		}
		if archives[i], err = os.ReadFile(filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Errorf("two builds gave different archives (%d and %d bytes)", len(archives[0]), len(archives[1]))
	}
	got := readArchive(t, filepath.Join(out, name))
	if len(got) != 1 {
		t.Fatalf("archive holds %+v, want kubectl-pinlab only", got)
	}
	want := entry{Name: "kubectl-pinlab", Mode: 0o755, ModTime: archiveTime.Unix(), Size: got[0].Size, FirstBytes: "\x7fELF"}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("archive entry (-want +got):\n%s", diff)
	}
	checkManifest(t, filepath.Join(out, "pinlab.yaml"), manifestPlatform{
		Selector: selector{MatchLabels: map[string]string{"os": "linux", "arch": "amd64"}},
		URI:      "https://example.com/dl/" + name,
		Sha256:   sha256File(t, filepath.Join(out, name)),
		Files:    []fileOp{{From: "kubectl-pinlab", To: "."}},
		Bin:      "kubectl-pinlab",
	})
}

// checkManifest decodes the manifest at file, strictly, and compares its
// one platform with want.
func checkManifest(t *testing.T, file string, want manifestPlatform) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "pinlab" || m.Spec.Version != "v1.2.3-rc.1" {
		t.Errorf("%s: apiVersion %q, kind %q, name %q, version %q", file, m.APIVersion, m.Kind, m.Metadata.Name, m.Spec.Version)
	}
	if m.Spec.ShortDescription == "" || bytes.ContainsAny([]byte(m.Spec.ShortDescription), "\r\n") || m.Spec.Homepage == "" || m.Spec.Description == "" {
		t.Errorf("%s: krew needs a one-line shortDescription; homepage and description are expected:\n%s", file, b)
	}
	if diff := cmp.Diff([]manifestPlatform{want}, m.Spec.Platforms); diff != "" {
		t.Errorf("%s: platforms (-want +got):\n%s", file, diff)
	}
}

// TestWriteArchive: the same files, given in any order, pack into the
// same bytes, sorted by name, owned by 0:0, at archiveTime.
func TestWriteArchive(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"bin": "\x7fELF binary", "LICENSE": "license text"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bin := archiveFile{name: "kubectl-pinlab", path: filepath.Join(dir, "bin"), mode: 0o755}
	license := archiveFile{name: "LICENSE", path: filepath.Join(dir, "LICENSE"), mode: 0o644}
	tests := []struct {
		name  string
		files []archiveFile
	}{
		{name: "sorted", files: []archiveFile{license, bin}},
		{name: "unsorted", files: []archiveFile{bin, license}},
	}
	var sums []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "a.tar.gz")
			sum, err := writeArchive(file, tt.files)
			if err != nil {
				t.Fatal(err)
			}
			if got := sha256File(t, file); got != sum {
				t.Errorf("writeArchive returned sha256 %s, the file has %s", sum, got)
			}
			sums = append(sums, sum)
			want := []entry{
				{Name: "LICENSE", Mode: 0o644, ModTime: archiveTime.Unix(), Size: 12, FirstBytes: "lice"},
				{Name: "kubectl-pinlab", Mode: 0o755, ModTime: archiveTime.Unix(), Size: 11, FirstBytes: "\x7fELF"},
			}
			if diff := cmp.Diff(want, readArchive(t, file)); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
	if len(sums) == 2 && sums[0] != sums[1] {
		t.Errorf("the same files packed into different archives: %s, %s", sums[0], sums[1])
	}
}

func TestParseFlags(t *testing.T) {
	base := []string{"-base-url", "https://example.com/dl", "-out", "dist"}
	tests := []struct {
		name    string
		args    []string
		want    []platform // nil: an error is wanted
		version string
	}{
		{name: "defaults", args: append([]string{"-version", "v0.3.0"}, base...), version: "v0.3.0",
			want: []platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}},
		{name: "one platform", args: append([]string{"-version", "v0.3.0", "-platforms", "linux/amd64"}, base...), version: "v0.3.0",
			want: []platform{{"linux", "amd64"}}},
		{name: "no v", args: append([]string{"-version", "0.3.0"}, base...)},
		{name: "not semver", args: append([]string{"-version", "v0.3"}, base...)},
		{name: "no version", args: base},
		{name: "no out", args: []string{"-version", "v0.3.0", "-base-url", "https://example.com/dl"}},
		{name: "bad platform", args: append([]string{"-version", "v0.3.0", "-platforms", "linux"}, base...)},
		{name: "relative base URL", args: []string{"-version", "v0.3.0", "-base-url", "dl", "-out", "dist"}},
		{name: "arguments", args: append(append([]string{"-version", "v0.3.0"}, base...), "extra")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parseFlags(tt.args, &stderr)
			if tt.want == nil {
				if err == nil {
					t.Errorf("parseFlags(%q) = %+v, want an error", tt.args, o)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags(%q): %v\n%s", tt.args, err, &stderr)
			}
			if diff := cmp.Diff(tt.want, o.platforms, cmp.AllowUnexported(platform{})); diff != "" || o.version != tt.version {
				t.Errorf("version %q, platforms (-want +got):\n%s", o.version, diff)
			}
		})
	}
}
