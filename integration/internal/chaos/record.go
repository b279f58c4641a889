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

// Phase says which end of a handler call a Record marks.
type Phase string

// The phases of a handler call.
const (
	// Start is written first thing in the handler.
	Start Phase = "start"
	// End is written last thing before the handler returns nil.
	End Phase = "end"
	// Abort is written last thing before the handler returns an error
	// (its context ended first): the event was not delivered by this run.
	Abort Phase = "abort"
)

// Record is one line of a replica's record file: a handler call of one
// event beginning or ending.
type Record struct {
	// ID is the event's ID.
	ID uuid.UUID
	// Replica names the replica process (one name per OS process, so a
	// restarted replica has a new name).
	Replica string
	// Attempt is outbox.Event.Attempt as the handler saw it.
	Attempt int
	// Phase is Start, End or Abort.
	Phase Phase
	// At is the wall clock of the replica's machine when the line was
	// written.
	At time.Time
}

// line encodes r as one line: "phase id replica attempt unixnano\n".
func (r Record) line() string {
	return fmt.Sprintf("%s %s %s %d %d\n", r.Phase, r.ID, r.Replica, r.Attempt, r.At.UnixNano())
}

// parseRecord decodes a line written by Recorder.
func parseRecord(line string) (Record, error) {
	f := strings.Fields(line)
	if len(f) != 5 {
		return Record{}, fmt.Errorf("want 5 fields, got %d", len(f))
	}
	id, err := uuid.Parse(f[1])
	if err != nil {
		return Record{}, err
	}
	attempt, err := strconv.Atoi(f[3])
	if err != nil {
		return Record{}, err
	}
	ns, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		return Record{}, err
	}
	ph := Phase(f[0])
	if ph != Start && ph != End && ph != Abort {
		return Record{}, fmt.Errorf("unknown phase %q", f[0])
	}
	return Record{ID: id, Replica: f[2], Attempt: attempt, Phase: ph, At: time.Unix(0, ns)}, nil
}

// Recorder appends Records to one replica's file. Each record is one
// write(2) of one line to a file opened with O_APPEND: once Write returns,
// the kernel holds the line, and a SIGKILL of the process loses nothing
// written before it. Safe for concurrent use (each write is atomic for
// lines this short on a local file).
type Recorder struct {
	f       *os.File
	replica string
}

// NewRecorder opens (creating it if needed) the record file at path for
// the replica named replica.
func NewRecorder(path, replica string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f, replica: replica}, nil
}

// Write records phase of the handler call of event id at attempt, now.
func (r *Recorder) Write(id uuid.UUID, attempt int, phase Phase) error {
	rec := Record{ID: id, Replica: r.replica, Attempt: attempt, Phase: phase, At: time.Now()}
	_, err := r.f.WriteString(rec.line())
	return err
}

// Close closes the file.
func (r *Recorder) Close() error { return r.f.Close() }

// ReadRecords reads every record of the files at paths. A last line cut
// short (which one write(2) makes impossible, but a full disk would not)
// is an error, as is any line that does not parse.
func ReadRecords(paths ...string) ([]Record, error) {
	var all []Record
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			rec, err := parseRecord(sc.Text())
			if err != nil {
				_ = f.Close()
				return nil, fmt.Errorf("%s:%d: %w", p, n, err)
			}
			all = append(all, rec)
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, err
		}
	}
	return all, nil
}
