package chaos

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// deliveredTag starts every line of a delivery record.
const deliveredTag = "delivered"

// WriteDelivery records d as acked now by the recorder's replica (its
// Replica and At are set here): one write(2) of one line,
// "delivered id key v replica call unixnano token", like Write. A key
// must hold no white space (the scenarios' keys are "k<n>").
func (r *Recorder) WriteDelivery(d Delivery) error {
	if d.Key == "" || strings.ContainsFunc(d.Key, isSpace) {
		return fmt.Errorf("chaos: delivery key %q: want a non-empty key without white space", d.Key)
	}
	// fmt.Fprintf formats the whole line, then writes it in one Write.
	_, err := fmt.Fprintf(r.f, "%s %s %s %d %s %d %d %s\n",
		deliveredTag, d.ID, d.Key, d.V, r.replica, d.Call, time.Now().UnixNano(), d.Token)
	return err
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// parseDelivery decodes a line written by WriteDelivery.
func parseDelivery(line string) (Delivery, error) {
	f := strings.Fields(line)
	if len(f) != 8 || f[0] != deliveredTag {
		return Delivery{}, fmt.Errorf("want %q and 7 fields", deliveredTag)
	}
	var d Delivery
	var err error
	if d.ID, err = uuid.Parse(f[1]); err != nil {
		return Delivery{}, err
	}
	d.Key, d.Replica = f[2], f[4]
	if d.V, err = strconv.ParseInt(f[3], 10, 64); err != nil {
		return Delivery{}, err
	}
	if d.Call, err = strconv.ParseInt(f[5], 10, 64); err != nil {
		return Delivery{}, err
	}
	ns, err := strconv.ParseInt(f[6], 10, 64)
	if err != nil {
		return Delivery{}, err
	}
	d.At = time.Unix(0, ns)
	if d.Token, err = uuid.Parse(f[7]); err != nil {
		return Delivery{}, err
	}
	return d, nil
}

// ReadDeliveries reads the delivery records of the files at paths, each
// file in its order of writing. A line that does not parse is an error.
func ReadDeliveries(paths ...string) ([]Delivery, error) {
	var all []Delivery
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			d, err := parseDelivery(sc.Text())
			if err != nil {
				_ = f.Close()
				return nil, fmt.Errorf("%s:%d: %w", p, n, err)
			}
			all = append(all, d)
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, err
		}
	}
	return all, nil
}
