package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"sort"
)

// digest is configsum's v1 digest (docs/behaviour.md, "Digest"): SHA-256 for a ConfigMap,
// HMAC-SHA-256 under the digest key for a Secret, over "configsum/v1\n", the kind, the
// length-prefixed namespace and name, then each consumed key in byte order, length-prefixed,
// followed by 0x01, the value's u64 length and the value, or 0x00 for a key it lacks.
func (w *webhook) digest(kind objectKind, namespace, name string, object *objectData, consumed *consumedKeys) string {
	var h hash.Hash
	prefix := "sha256:"
	if kind == secretKind && len(w.digestKey) > 0 {
		h, prefix = hmac.New(sha256.New, w.digestKey), "hmac-sha256:"
	} else {
		h = sha256.New()
	}
	h.Write([]byte("configsum/v1\n"))
	if kind == secretKind {
		h.Write([]byte("Secret\n"))
	} else {
		h.Write([]byte("ConfigMap\n"))
	}
	writeString(h, namespace)
	writeString(h, name)
	var keys []string
	if consumed.all {
		keys = object.sortedKeys
	} else {
		for key := range consumed.keys {
			keys = append(keys, key)
		}
		sort.Strings(keys)
	}
	var length [8]byte
	for _, key := range keys {
		writeString(h, key)
		value, present := object.data[key]
		if !present {
			h.Write([]byte{0})
			continue
		}
		h.Write([]byte{1})
		binary.BigEndian.PutUint64(length[:], uint64(len(value)))
		h.Write(length[:])
		h.Write(value)
	}
	return prefix + hex.EncodeToString(h.Sum(nil))
}

func writeString(h hash.Hash, s string) {
	var length [4]byte
	binary.BigEndian.PutUint32(length[:], uint32(len(s)))
	h.Write(length[:])
	h.Write([]byte(s))
}
