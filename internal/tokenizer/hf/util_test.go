package hf

import (
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func utf8ValidString(s string) bool { return utf8.ValidString(s) }
func normNFC(s string) string       { return norm.NFC.String(s) }
