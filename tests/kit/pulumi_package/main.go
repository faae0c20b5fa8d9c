// Command pulumi-package checks the component package as the Pulumi CLI meets it, with Pulumi's
// own code (github.com/pulumi/pulumi/pkg/v3 and sdk/v3): it loads the plugin's PulumiPlugin.yaml
// with the CLI's plugin project loader, binds the schema the provider serves with the schema
// binder `pulumi package add` runs (which validates it against Pulumi's metaschema), and writes
// the Node.js SDK that `pulumi package add` would generate from it for a TypeScript program.
//
// Usage: pulumi-package <plugin directory> <schema.json> <SDK output directory>
//
// It prints, as JSON, the plugin's runtime and the binder's warnings; a plugin or schema Pulumi
// refuses makes it exit 1 with Pulumi's own errors on stderr.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/pkg/v3/codegen/nodejs"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

type report struct {
	Runtime  string   `json:"runtime"`
	Package  string   `json:"package"`
	Version  string   `json:"version"`
	Warnings []string `json:"warnings"`
	Files    []string `json:"files"`
}

func main() {
	if len(os.Args) != 4 {
		fail("usage: pulumi-package <plugin directory> <schema.json> <SDK output directory>")
	}
	plugin, err := workspace.LoadPluginProject(filepath.Join(os.Args[1], "PulumiPlugin.yaml"))
	if err != nil {
		fail(err.Error())
	}
	data, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail(err.Error())
	}
	var spec schema.PackageSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		fail(err.Error())
	}
	pkg, diags, err := schema.BindSpec(spec, noPackages{}, schema.ValidationOptions{})
	if err != nil {
		fail(err.Error())
	}
	out := report{Runtime: plugin.Runtime.Name(), Package: pkg.Name, Warnings: []string{},
		Files: []string{}}
	if pkg.Version != nil {
		out.Version = pkg.Version.String()
	}
	for _, d := range diags {
		if d.Severity == 1 { // hcl.DiagError
			fail(diags.Error())
		}
		out.Warnings = append(out.Warnings, d.Error())
	}
	files, err := nodejs.GeneratePackage("pulumi-package", pkg, nil, nil, false, noPackages{})
	if err != nil {
		fail(err.Error())
	}
	for name, content := range files {
		path := filepath.Join(os.Args[3], name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fail(err.Error())
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			fail(err.Error())
		}
		out.Files = append(out.Files, name)
	}
	encoded, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(encoded))
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, message)
	os.Exit(1)
}

// noPackages loads no other package: the components' schema refers to none, so a reference to
// one is an error the binder reports.
type noPackages struct{}

func (noPackages) LoadPackage(name string, _ *semver.Version) (*schema.Package, error) {
	return nil, fmt.Errorf("the schema refers to package %q, which is not loaded", name)
}

func (l noPackages) LoadPackageV2(_ context.Context, d *schema.PackageDescriptor) (
	*schema.Package, error,
) {
	return l.LoadPackage(d.Name, d.Version)
}

func (l noPackages) LoadPackageReference(name string, v *semver.Version) (
	schema.PackageReference, error,
) {
	return nil, fmt.Errorf("the schema refers to package %q, which is not loaded", name)
}

func (l noPackages) LoadPackageReferenceV2(_ context.Context, d *schema.PackageDescriptor) (
	schema.PackageReference, error,
) {
	return l.LoadPackageReference(d.Name, d.Version)
}
