// refpeer: a small peer written the way the reference's Go peers are (net/http, default
// transport, encoding/json with untagged structs), used by node/tests/interop_go.rs.
//
//	refpeer serve DIR ID       serves DIR/<chunk-hex>/<index> at /peer/v1/block/<hex>/<index>
//	                           and a roster at /peer/v1/roster on 127.0.0.1:0; prints
//	                           "listening ADDR" and runs until stdin closes
//	refpeer fetch ADDR PATH... GETs each path (one goroutine per path, as the reference's
//	                           client does) and prints "PATH STATUS LEN NODE HEX" lines
//	                           (the body in hex: small test blocks only)
//	refpeer roster ADDR ID MY-ADDR
//	                           GETs the roster identifying itself, prints the decoded members
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

type RosterMember struct {
	ID     string
	Addr   string
	Weight float64
}

type Roster struct {
	Epoch   string
	Members []RosterMember
}

func serve(dir, id string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	addr := ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/peer/v1/block/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-DART-Node", id)
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		rest := strings.TrimPrefix(r.URL.Path, "/peer/v1/block/")
		parts := strings.Split(rest, "/")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" || strings.Contains(rest, "..") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		body, err := os.ReadFile(filepath.Join(dir, parts[0], parts[1]))
		if err != nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.WriteHeader(http.StatusOK)
		w.Write(body)
	})
	var mu sync.Mutex
	members := []RosterMember{{ID: id, Addr: addr, Weight: 1}}
	mux.HandleFunc("/peer/v1/roster", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if caller, peer := r.Header.Get("X-DART-Node"), r.Header.Get("X-DART-Peer-Addr"); caller != "" && peer != "" {
			known := false
			for _, m := range members {
				known = known || m.ID == caller
			}
			if !known {
				members = append(members, RosterMember{ID: caller, Addr: peer, Weight: 1})
			}
		}
		body, _ := json.Marshal(Roster{Epoch: "", Members: members})
		mu.Unlock()
		w.Header().Set("X-DART-Node", id)
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	fmt.Println("listening", addr)
	go http.Serve(ln, mux)
	io.Copy(io.Discard, os.Stdin)
}

func fetch(addr string, paths []string) {
	var wg sync.WaitGroup
	out := make([]string, len(paths))
	for i, p := range paths {
		wg.Add(1)
		go func(i int, p string) {
			defer wg.Done()
			resp, err := http.Get("http://" + addr + p)
			if err != nil {
				out[i] = fmt.Sprintf("%s error %v", p, err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				out[i] = fmt.Sprintf("%s error %v", p, err)
				return
			}
			out[i] = fmt.Sprintf("%s %d %d %s %s", p, resp.StatusCode, len(body), resp.Header.Get("X-DART-Node"), hex.EncodeToString(body))
		}(i, p)
	}
	wg.Wait()
	w := bufio.NewWriter(os.Stdout)
	for _, line := range out {
		fmt.Fprintln(w, line)
	}
	w.Flush()
}

func roster(addr, id, me string) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/peer/v1/roster", nil)
	req.Header.Set("X-DART-Node", id)
	req.Header.Set("X-DART-Peer-Addr", me)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	var r Roster
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Printf("status %d epoch %q\n", resp.StatusCode, r.Epoch)
	for _, m := range r.Members {
		fmt.Printf("member %s %s %g\n", m.ID, m.Addr, m.Weight)
	}
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: refpeer serve DIR ID | fetch ADDR PATH... | roster ADDR ID MY-ADDR")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2], os.Args[3])
	case "fetch":
		fetch(os.Args[2], os.Args[3:])
	case "roster":
		roster(os.Args[2], os.Args[3], os.Args[4])
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}
