package main

import (
	"testing"

	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// TestOverridesKeepTagsStrings: the image tag is the commit's short hash,
// and a hash of digits with one "e" (57969e7) is a number to YAML.
// Unquoted, kustomize refused the whole system kustomization ("cannot
// unmarshal number into ... newTag") and CI failed on that commit.
func TestOverridesKeepTagsStrings(t *testing.T) {
	for _, version := range []string{"57969e7", "1234567", "0x1f", "true", "v1.2.3"} {
		o := options{repo: "ghcr.io/example", version: version, fakeCards: "2", deviceRoot: true}
		for name, text := range map[string]string{
			"system":    systemOverrides(o),
			"examples":  examplesOverrides(o),
			"dra-agent": draAgentOverrides(o),
		} {
			var k types.Kustomization
			if err := yaml.UnmarshalStrict([]byte(text), &k); err != nil {
				t.Fatalf("%s overrides with version %q: %v", name, version, err)
			}
			if len(k.Images) == 0 {
				t.Fatalf("%s overrides: no images", name)
			}
			for _, im := range k.Images {
				if im.NewTag != version {
					t.Errorf("%s overrides: image %s tag %q, want %q", name, im.Name, im.NewTag, version)
				}
			}
		}
	}
}
