// kubicle-health prints what GitOps tools compute for Kubicle objects, with
// their own code: kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status, what
// Flux and kpt run) and the chart's Argo CD health checks
// (helm/kubicle/argocd/health-<Kind>.lua) run by gopher-lua, the
// interpreter Argo CD embeds, set up as Argo CD sets it up.
//
// Usage:
//
//	kubicle-health --argocd DIR [FILE...]
//	    Reads JSON objects (one object, a List such as `kubectl get -o json`
//	    prints, or a stream of them) from the files or stdin and prints one
//	    JSON line per object: {kind, namespace, name, generation,
//	    kstatus: {status, message}, argocd: {status, message}}.
//	kubicle-health --argocd DIR --expect [FILE...]
//	    Reads cases {kind, phase, object, kstatus, argocd} (what
//	    kubicle-health-phases prints), prints each with both answers, and
//	    exits 1 when any answer differs from the case's.
//	kubicle-health --argocd DIR --argocd-cm FILE
//	    Exits 1 unless the ConfigMap patch in FILE (what docs/helm.md tells
//	    Argo CD users to apply) holds exactly the scripts in DIR.
//	kubicle-health --argocd DIR --print-argocd-cm
//	    Prints that patch (helm/kubicle/argocd/argocd-cm.yaml).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type answer struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type report struct {
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	Kstatus    answer `json:"kstatus"`
	Argocd     answer `json:"argocd"`
}

type healthCase struct {
	Kind    string          `json:"kind"`
	Phase   string          `json:"phase"`
	Object  json.RawMessage `json:"object"`
	Kstatus string          `json:"kstatus"`
	Argocd  string          `json:"argocd"`
}

func kstatusOf(obj map[string]interface{}) answer {
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return answer{"Error", err.Error()}
	}
	return answer{res.Status.String(), res.Message}
}

func evaluate(obj map[string]interface{}, argocdDir string) (report, error) {
	u := unstructured.Unstructured{Object: obj}
	r := report{Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName(),
		Generation: u.GetGeneration(), Kstatus: kstatusOf(obj)}
	script, err := os.ReadFile(filepath.Join(argocdDir, "health-"+u.GetKind()+".lua"))
	if err != nil {
		return r, err
	}
	r.Argocd = argoHealth(obj, string(script))
	return r, nil
}

// object decodes as client-go does (whole numbers as int64), so kstatus
// reads metadata.generation as it does in Flux.
func object(raw []byte) (map[string]interface{}, error) {
	var obj map[string]interface{}
	err := utiljson.Unmarshal(raw, &obj)
	return obj, err
}

// decode calls fn with each top-level JSON value of r; a List's items one
// by one.
func decode(r io.Reader, fn func(json.RawMessage) error) error {
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		var list struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &list); err == nil && strings.HasSuffix(list.Kind, "List") {
			for _, item := range list.Items {
				if err := fn(item); err != nil {
					return err
				}
			}
			continue
		}
		if err := fn(raw); err != nil {
			return err
		}
	}
}

func inputs(files []string) ([]io.Reader, func(), error) {
	if len(files) == 0 {
		return []io.Reader{os.Stdin}, func() {}, nil
	}
	var out []io.Reader
	var opened []*os.File
	closeAll := func() {
		for _, f := range opened {
			f.Close()
		}
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		opened = append(opened, f)
		out = append(out, f)
	}
	return out, closeAll, nil
}

func run(argocdDir string, expect bool, files []string) (int, error) {
	readers, closeAll, err := inputs(files)
	if err != nil {
		return 2, err
	}
	defer closeAll()
	out := json.NewEncoder(os.Stdout)
	mismatches, cases := 0, 0
	for _, r := range readers {
		err := decode(r, func(raw json.RawMessage) error {
			if !expect {
				obj, err := object(raw)
				if err != nil {
					return err
				}
				rep, err := evaluate(obj, argocdDir)
				if err != nil {
					return err
				}
				return out.Encode(rep)
			}
			var c healthCase
			if err := json.Unmarshal(raw, &c); err != nil {
				return err
			}
			cases++
			obj, err := object(c.Object)
			if err != nil {
				return err
			}
			rep, err := evaluate(obj, argocdDir)
			if err != nil {
				return err
			}
			verdict := "ok"
			if rep.Kstatus.Status != c.Kstatus || rep.Argocd.Status != c.Argocd {
				verdict = fmt.Sprintf("MISMATCH (want kstatus %s, argocd %s)", c.Kstatus, c.Argocd)
				mismatches++
			}
			fmt.Printf("%-15s %-26s kstatus %-11s argocd %-11s %s\n    kstatus: %s\n    argocd:  %s\n",
				c.Kind, c.Phase, rep.Kstatus.Status, rep.Argocd.Status, verdict,
				rep.Kstatus.Message, rep.Argocd.Message)
			return nil
		})
		if err != nil {
			return 2, err
		}
	}
	if expect {
		fmt.Printf("%d cases, %d mismatches\n", cases, mismatches)
		if cases == 0 {
			return 1, errors.New("no cases read")
		}
		if mismatches > 0 {
			return 1, nil
		}
	}
	return 0, nil
}

func scriptsByKey(argocdDir string) (map[string]string, error) {
	scripts, err := filepath.Glob(filepath.Join(argocdDir, "health-*.lua"))
	if err != nil || len(scripts) == 0 {
		return nil, fmt.Errorf("no health-*.lua in %s", argocdDir)
	}
	out := map[string]string{}
	for _, s := range scripts {
		kind := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(s), "health-"), ".lua")
		text, err := os.ReadFile(s)
		if err != nil {
			return nil, err
		}
		out["resource.customizations.health.kubicle.dev_"+kind] = string(text)
	}
	return out, nil
}

const configMapHeader = `# GENERATED by kubicle-health --print-argocd-cm from helm/kubicle/argocd/
# health-*.lua -- do not edit. Merge into Argo CD's argocd-cm ConfigMap:
#   kubectl -n argocd patch configmap argocd-cm --patch-file argocd-cm.yaml
`

func printConfigMap(argocdDir string) error {
	data, err := scriptsByKey(argocdDir)
	if err != nil {
		return err
	}
	out, err := yaml.Marshal(map[string]interface{}{"data": data})
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append([]byte(configMapHeader), out...))
	return err
}

// checkConfigMap compares the argocd-cm snippet with the scripts.
func checkConfigMap(argocdDir, file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		return err
	}
	want, err := scriptsByKey(argocdDir)
	if err != nil {
		return err
	}
	for key, script := range want {
		got, ok := cm.Data[key]
		if !ok {
			return fmt.Errorf("%s: no key %s", file, key)
		}
		if got != script {
			return fmt.Errorf("%s: %s differs from its script in %s", file, key, argocdDir)
		}
		delete(cm.Data, key)
	}
	for key := range cm.Data {
		return fmt.Errorf("%s: key %s has no script in %s", file, key, argocdDir)
	}
	return nil
}

func main() {
	argocdDir := flag.String("argocd", "", "directory of health-<Kind>.lua scripts")
	expect := flag.Bool("expect", false, "read {kind, phase, object, kstatus, argocd} cases and compare")
	configMap := flag.String("argocd-cm", "", "check that this argocd-cm patch holds the scripts")
	printCM := flag.Bool("print-argocd-cm", false, "print the argocd-cm patch holding the scripts")
	flag.Parse()
	if *argocdDir == "" {
		fmt.Fprintln(os.Stderr, "kubicle-health: --argocd DIR is required")
		os.Exit(2)
	}
	if *printCM {
		if err := printConfigMap(*argocdDir); err != nil {
			fmt.Fprintln(os.Stderr, "kubicle-health:", err)
			os.Exit(1)
		}
		return
	}
	if *configMap != "" {
		if err := checkConfigMap(*argocdDir, *configMap); err != nil {
			fmt.Fprintln(os.Stderr, "kubicle-health:", err)
			os.Exit(1)
		}
		fmt.Println("argocd-cm holds the scripts")
		return
	}
	code, err := run(*argocdDir, *expect, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubicle-health:", err)
	}
	os.Exit(code)
}
