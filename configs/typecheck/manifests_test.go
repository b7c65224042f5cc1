package typecheck

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kustomize "sigs.k8s.io/kustomize/api/types"
)

// configsDir is configs/, above this module.
const configsDir = ".."

// inferqConfigs are the files under configs/ that are inferq's own
// config files, not Kubernetes manifests; the configs package's tests
// parse them (models.Parse). Any other YAML file there is a manifest.
var inferqConfigs = []string{"embedded.yaml", "multi-gpu.yaml"}

// manifestFiles lists the YAML and JSON files under configs/, relative
// to it, but for this module's own directory.
func manifestFiles(t *testing.T) (manifests []string) {
	t.Helper()
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(configsDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if abs, err := filepath.Abs(p); err == nil && abs == self {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			rel, err := filepath.Rel(configsDir, p)
			if err != nil {
				return err
			}
			manifests = append(manifests, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range inferqConfigs {
		i := slices.Index(manifests, c)
		if i < 0 {
			t.Errorf("configs/%s is gone: take it out of inferqConfigs", c)
			continue
		}
		manifests = slices.Delete(manifests, i, i+1)
	}
	return manifests
}

// Every document of every manifest under configs/ decodes strictly into
// the typed object of its kind (issue 27 item 7): a misspelt or unknown
// field, a value of the wrong type, a wrong apiVersion or a kind the check
// does not know fails here, naming the file, the document and the field.
func TestManifestsDecodeStrictly(t *testing.T) {
	files := manifestFiles(t)
	if !slices.Contains(files, "kubernetes/statefulset.yaml") {
		t.Fatalf("manifests %v lack kubernetes/statefulset.yaml", files)
	}
	byKind := map[GVK][]string{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(configsDir, f))
		if err != nil {
			t.Fatal(err)
		}
		docs, err := Decode("configs/"+f, data)
		if err != nil {
			if strings.Contains(err.Error(), "not a Kubernetes manifest") {
				err = fmt.Errorf("%w\n(if configs/%s is an inferq config, add it to inferqConfigs)", err, f)
			}
			t.Error(err)
		}
		if len(docs) == 0 && err == nil {
			t.Errorf("configs/%s holds no manifest: if it is an inferq config, add it to inferqConfigs", f)
		}
		for _, d := range docs {
			byKind[d.GVK] = append(byKind[d.GVK], d.Where())
			if k, ok := d.Object.(*kustomize.Kustomization); ok {
				checkKustomization(t, d, k)
			}
		}
	}
	for g, where := range byKind {
		t.Logf("%s: %s", g, strings.Join(where, ", "))
	}
}

// A Kustomization's resources are files beside it that are manifests
// (kustomize build fails on a missing one).
func checkKustomization(t *testing.T, d Document, k *kustomize.Kustomization) {
	t.Helper()
	if len(k.Resources) == 0 {
		t.Errorf("%s: no resources", d.Where())
	}
	dir := filepath.Dir(strings.TrimPrefix(d.File, "configs/"))
	for _, r := range k.Resources {
		if strings.Contains(r, "://") {
			continue // a remote resource
		}
		p := filepath.Join(configsDir, dir, r)
		if st, err := os.Stat(p); err != nil {
			t.Errorf("%s: resource %s: %v", d.Where(), r, err)
		} else if !st.IsDir() && slices.Contains(inferqConfigs, filepath.ToSlash(filepath.Join(dir, r))) {
			t.Errorf("%s: resource %s is an inferq config, not a manifest", d.Where(), r)
		}
	}
}
