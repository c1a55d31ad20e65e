// Command proto-schema prints, as JSON, the protobuf layout of every Go type client-go's
// scheme (and apiextensions' v1) registers and every struct reachable from them: each
// field's protobuf number, wire type and label (from its `protobuf:"..."` struct tag), its
// JSON name and `omitempty` (from its `json:"..."` tag), and its Go shape (pointer, slice,
// map, named struct). The struct tags are the one place that carries both the JSON name
// (which k8s-openapi's field names are made from) and the protobuf number; the .proto files
// carry no JSON names and no pointer-ness. `cargo xtask protobuf` runs it and generates
// crates/rudder-protobuf's decoders from its output (crates/rudder-protobuf/schema.json).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// Type is a Go type's shape.
type Type struct {
	// Kind is string, bool, int32, int64, uint32, uint64, float64, bytes, struct, ptr,
	// slice, map (or another reflect.Kind's name, which the generator refuses).
	Kind string `json:"kind"`
	// Named is the package path and name of a named type ("k8s.io/api/core/v1.PodSpec").
	Named string `json:"named,omitempty"`
	Elem  *Type  `json:"elem,omitempty"`
	Key   *Type  `json:"key,omitempty"`
}

// Field is one exported field of a struct.
type Field struct {
	Go        string `json:"go"`
	JSON      string `json:"json"`
	OmitEmpty bool   `json:"omitempty,omitempty"`
	Inline    bool   `json:"inline,omitempty"`
	// Tag is the protobuf number; 0 when the field has no protobuf tag (TypeMeta).
	Tag   int    `json:"tag,omitempty"`
	Wire  string `json:"wire,omitempty"`
	Label string `json:"label,omitempty"`
	Type  Type   `json:"type"`
}

// Kind is one registered kind.
type Kind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
	Type    string `json:"type"`
}

// Schema is the program's output.
type Schema struct {
	Kinds []Kind             `json:"kinds"`
	Types map[string][]Field `json:"types"`
}

func name(t reflect.Type) string {
	if t.Name() == "" {
		return ""
	}
	return t.PkgPath() + "." + t.Name()
}

func shape(t reflect.Type, queue *[]reflect.Type) Type {
	out := Type{Named: name(t)}
	switch t.Kind() {
	case reflect.Ptr:
		out.Kind = "ptr"
		e := shape(t.Elem(), queue)
		out.Elem = &e
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			out.Kind = "bytes"
			return out
		}
		out.Kind = "slice"
		e := shape(t.Elem(), queue)
		out.Elem = &e
	case reflect.Map:
		out.Kind = "map"
		k := shape(t.Key(), queue)
		e := shape(t.Elem(), queue)
		out.Key, out.Elem = &k, &e
	case reflect.Struct:
		out.Kind = "struct"
		*queue = append(*queue, t)
	case reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64, reflect.Bool, reflect.String, reflect.Float64:
		out.Kind = t.Kind().String()
	default:
		out.Kind = t.Kind().String()
	}
	if t.Kind() != reflect.Struct && t.Kind() != reflect.Slice && t.Kind() != reflect.Map {
		// A named scalar (type Protocol string) is its underlying kind; the name is noise.
		out.Named = ""
	}
	return out
}

func fields(t reflect.Type, queue *[]reflect.Type) []Field {
	out := []Field{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		jsonTag := f.Tag.Get("json")
		if jsonTag == "-" {
			continue
		}
		parts := strings.Split(jsonTag, ",")
		field := Field{Go: f.Name, JSON: parts[0]}
		for _, p := range parts[1:] {
			switch p {
			case "omitempty":
				field.OmitEmpty = true
			case "inline":
				field.Inline = true
			}
		}
		if jsonTag == "" && f.Anonymous {
			field.Inline = true
		}
		if pb := f.Tag.Get("protobuf"); pb != "" {
			p := strings.Split(pb, ",")
			if len(p) >= 3 {
				field.Wire = p[0]
				n, err := strconv.Atoi(p[1])
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s.%s: protobuf tag %q: %v\n", name(t), f.Name, pb, err)
					os.Exit(1)
				}
				field.Tag = n
				field.Label = p[2]
			}
		}
		field.Type = shape(f.Type, queue)
		out = append(out, field)
	}
	return out
}

func main() {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	metav1.AddToGroupVersion(s, metav1.SchemeGroupVersion)
	out := Schema{Types: map[string][]Field{}}
	var queue []reflect.Type
	for gvk, t := range s.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		out.Kinds = append(out.Kinds, Kind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Type: name(t)})
		queue = append(queue, t)
	}
	// The envelopes and metav1 types a client meets outside any group.
	for _, v := range []any{metav1.Status{}, metav1.WatchEvent{}, runtime.Unknown{}, metav1.List{}, metav1.PartialObjectMetadata{}, metav1.Table{}} {
		queue = append(queue, reflect.TypeOf(v))
	}
	for len(queue) > 0 {
		t := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		n := name(t)
		if _, done := out.Types[n]; done || n == "" {
			continue
		}
		out.Types[n] = fields(t, &queue)
	}
	sort.Slice(out.Kinds, func(i, j int) bool {
		a, b := out.Kinds[i], out.Kinds[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Kind < b.Kind
	})
	// One kind and one field a line: small, and a diff shows what changed.
	w := bufio.NewWriter(os.Stdout)
	line := func(prefix string, v any, suffix string) {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(w, "%s%s%s\n", prefix, b, suffix)
	}
	fmt.Fprintln(w, `{"kinds": [`)
	for i, k := range out.Kinds {
		line(" ", k, comma(i, len(out.Kinds)))
	}
	fmt.Fprintln(w, `], "types": {`)
	names := make([]string, 0, len(out.Types))
	for n := range out.Types {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		b, _ := json.Marshal(n)
		fmt.Fprintf(w, " %s: [\n", b)
		for j, f := range out.Types[n] {
			line("  ", f, comma(j, len(out.Types[n])))
		}
		fmt.Fprintf(w, " ]%s\n", comma(i, len(names)))
	}
	fmt.Fprintln(w, "}}")
	if err := w.Flush(); err != nil {
		panic(err)
	}
}

func comma(i, n int) string {
	if i+1 < n {
		return ","
	}
	return ""
}
