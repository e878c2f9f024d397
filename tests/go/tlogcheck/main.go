// Command tlogcheck checks auditmem's transparency-log artifacts with Go's own
// golang.org/x/mod/sumdb/note and golang.org/x/mod/sumdb/tlog (Debian's
// golang-golang-x-mod-dev, built in GOPATH mode): an implementation that shares no
// code with the service. tests/it/tlog_go.rs runs it against a live server.
//
//	tlogcheck inclusion PROOF.json VERIFIER_KEY
//	tlogcheck consistency OLD.note NEW.note PROOF.json VERIFIER_KEY
//	tlogcheck cosignature NOTE WITNESS_VERIFIER_KEY
//	tlogcheck tiles BASE_URL NOTE VERIFIER_KEY
//
// It prints "ok" and exits 0 when the artifact verifies, prints why and exits 1
// when it does not, and exits 2 on bad usage.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "inclusion":
		need(4)
		err = inclusion(os.Args[2], os.Args[3])
	case "consistency":
		need(6)
		err = consistency(os.Args[2], os.Args[3], os.Args[4], os.Args[5])
	case "cosignature":
		need(4)
		err = cosignature(os.Args[2], os.Args[3])
	case "tiles":
		need(5)
		err = tiles(os.Args[2], os.Args[3], os.Args[4])
	default:
		usage()
	}
	if err != nil {
		fmt.Println("FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("ok")
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: tlogcheck inclusion|consistency|cosignature|tiles ...")
	os.Exit(2)
}

func need(n int) {
	if len(os.Args) != n {
		usage()
	}
}

// readJSON reads a proof, bare or inside the API's {"data": ...} envelope.
func readJSON(path string, v interface{}) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(b, &env) == nil && len(env.Data) > 0 {
		b = env.Data
	}
	return json.Unmarshal(b, v)
}

type checkpoint struct {
	origin string
	size   int64
	root   tlog.Hash
}

// openCheckpoint verifies the note's signature by vkey and parses its C2SP
// tlog-checkpoint body (origin, size, base64 root).
func openCheckpoint(msg []byte, vkey string) (checkpoint, error) {
	var cp checkpoint
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return cp, fmt.Errorf("verifier key: %v", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		return cp, fmt.Errorf("note: %v", err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 {
		return cp, errors.New("checkpoint body has fewer than three lines")
	}
	cp.origin = lines[0]
	if cp.origin != v.Name() {
		return cp, fmt.Errorf("origin %q is not the key's name %q", cp.origin, v.Name())
	}
	cp.size, err = strconv.ParseInt(lines[1], 10, 64)
	if err != nil || cp.size < 0 {
		return cp, fmt.Errorf("bad tree size %q", lines[1])
	}
	cp.root, err = tlog.ParseHash(lines[2])
	if err != nil {
		return cp, fmt.Errorf("bad root hash: %v", err)
	}
	return cp, nil
}

func hashes(list []string) (tlog.TreeProof, error) {
	out := make(tlog.TreeProof, len(list))
	for i, s := range list {
		h, err := tlog.ParseHash(s)
		if err != nil {
			return nil, fmt.Errorf("proof hash %d: %v", i, err)
		}
		out[i] = h
	}
	return out, nil
}

func inclusion(path, vkey string) error {
	var p struct {
		Seq        int64    `json:"seq"`
		LeafIndex  int64    `json:"leaf_index"`
		RecordHash string   `json:"record_hash"`
		TreeSize   int64    `json:"tree_size"`
		Inclusion  []string `json:"inclusion"`
		Checkpoint string   `json:"checkpoint"`
	}
	if err := readJSON(path, &p); err != nil {
		return err
	}
	cp, err := openCheckpoint([]byte(p.Checkpoint), vkey)
	if err != nil {
		return err
	}
	if cp.size != p.TreeSize {
		return fmt.Errorf("checkpoint is for size %d, proof for %d", cp.size, p.TreeSize)
	}
	rh, err := hex.DecodeString(p.RecordHash)
	if err != nil || len(rh) != 32 {
		return errors.New("record_hash is not 32 bytes of hex")
	}
	if p.LeafIndex != p.Seq-1 {
		return fmt.Errorf("leaf %d is not seq %d's", p.LeafIndex, p.Seq)
	}
	// The leaf: the record's seq, 8 bytes big-endian, then its blake3 hash.
	leaf := make([]byte, 8, 40)
	binary.BigEndian.PutUint64(leaf, uint64(p.Seq))
	leaf = append(leaf, rh...)
	proof, err := hashes(p.Inclusion)
	if err != nil {
		return err
	}
	return tlog.CheckRecord(tlog.RecordProof(proof), cp.size, cp.root, p.LeafIndex, tlog.RecordHash(leaf))
}

func consistency(oldPath, newPath, proofPath, vkey string) error {
	oldNote, err := os.ReadFile(oldPath)
	if err != nil {
		return err
	}
	newNote, err := os.ReadFile(newPath)
	if err != nil {
		return err
	}
	a, err := openCheckpoint(oldNote, vkey)
	if err != nil {
		return fmt.Errorf("old: %v", err)
	}
	b, err := openCheckpoint(newNote, vkey)
	if err != nil {
		return fmt.Errorf("new: %v", err)
	}
	var p struct {
		From  int64    `json:"from"`
		To    int64    `json:"to"`
		Proof []string `json:"proof"`
	}
	if err := readJSON(proofPath, &p); err != nil {
		return err
	}
	if p.From != a.size || p.To != b.size {
		return fmt.Errorf("proof is %d->%d, checkpoints %d->%d", p.From, p.To, a.size, b.size)
	}
	proof, err := hashes(p.Proof)
	if err != nil {
		return err
	}
	return tlog.CheckTree(proof, b.size, b.root, a.size, a.root)
}

// cosignature checks a C2SP tlog-cosignature/v1 line of the note by hand:
// x/mod's note package knows only Ed25519 (type 0x01) keys.
func cosignature(notePath, vkey string) error {
	msg, err := os.ReadFile(notePath)
	if err != nil {
		return err
	}
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return errors.New("witness key is not name+id+key")
	}
	name := parts[0]
	key, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(key) != 33 || key[0] != 0x04 {
		return errors.New("witness key is not a cosignature/v1 (0x04) Ed25519 key")
	}
	idSum := sha256.Sum256(append([]byte(name+"\n"), key...))
	id := idSum[:4]
	if hex.EncodeToString(id) != parts[1] {
		return errors.New("witness key id does not match its name and key")
	}
	i := bytes.LastIndex(msg, []byte("\n\n"))
	if i < 0 {
		return errors.New("note has no signature block")
	}
	text, sigs := msg[:i+1], string(msg[i+2:])
	for _, line := range strings.Split(sigs, "\n") {
		prefix := "\u2014 " + name + " "
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(line, prefix))
		if err != nil || len(sig) != 4+8+64 || !bytes.Equal(sig[:4], id) {
			continue
		}
		ts := binary.BigEndian.Uint64(sig[4:12])
		signed := append([]byte(fmt.Sprintf("cosignature/v1\ntime %d\n", ts)), text...)
		if ed25519.Verify(ed25519.PublicKey(key[1:]), signed, sig[12:]) {
			return nil
		}
		return fmt.Errorf("cosignature by %s does not verify", name)
	}
	return fmt.Errorf("no cosignature by %s", name)
}

// httpTiles reads C2SP hash tiles (tile/<L>/<N>[.p/<W>], height 8) over HTTP;
// tlog.TileHashReader checks every tile it reads against the signed tree.
type httpTiles struct{ base string }

func (t httpTiles) Height() int { return 8 }

func (t httpTiles) ReadTiles(list []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(list))
	for i, tile := range list {
		// x/mod writes tile/8/L/N; C2SP drops the height.
		path := strings.Replace(tile.Path(), "tile/8/", "tile/", 1)
		resp, err := http.Get(t.base + "/" + path)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("%s: %s", path, resp.Status)
		}
		out[i] = body
	}
	return out, nil
}

func (t httpTiles) SaveTiles([]tlog.Tile, [][]byte) {}

// tiles follows the log as a generic tlog client: the tree hash and an
// inclusion proof of every 97th leaf, all from tiles checked against the note.
func tiles(base, notePath, vkey string) error {
	msg, err := os.ReadFile(notePath)
	if err != nil {
		return err
	}
	cp, err := openCheckpoint(msg, vkey)
	if err != nil {
		return err
	}
	tree := tlog.Tree{N: cp.size, Hash: cp.root}
	r := tlog.TileHashReader(tree, httpTiles{base: strings.TrimSuffix(base, "/")})
	h, err := tlog.TreeHash(cp.size, r)
	if err != nil {
		return err
	}
	if h != cp.root {
		return errors.New("the tiles' tree hash is not the checkpoint's root")
	}
	for n := int64(0); n < cp.size; n += 97 {
		p, err := tlog.ProveRecord(cp.size, n, r)
		if err != nil {
			return fmt.Errorf("leaf %d: %v", n, err)
		}
		leaves, err := r.ReadHashes([]int64{tlog.StoredHashIndex(0, n)})
		if err != nil {
			return err
		}
		if err := tlog.CheckRecord(p, cp.size, cp.root, n, leaves[0]); err != nil {
			return fmt.Errorf("leaf %d: %v", n, err)
		}
	}
	return nil
}
