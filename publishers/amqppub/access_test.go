package amqppub_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/amqppub"
)

// restrictedUser creates a RabbitMQ user unique to the test, allowed to
// write only to the exchanges matching writeRe (and to configure and read
// nothing), deleted at cleanup, and returns the URL that logs in as it;
// then runs rabbitmqctl with each of more, the user's name appended.
// Without rabbitmqctl the test fails under CI=true and is skipped
// otherwise; it is skipped when AMQP_URL names another machine's broker,
// which the local rabbitmqctl does not manage.
func restrictedUser(t *testing.T, writeRe string, more ...[]string) string {
	t.Helper()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("rabbitmqctl is needed to create a user without write permission: %v", err)
		}
		t.Skipf("rabbitmqctl is missing (needed to create a user without write permission): %v", err)
	}
	uri, err := amqp.ParseURI(amqpURL)
	require.NoError(t, err)
	if uri.Host != "127.0.0.1" && uri.Host != "localhost" && uri.Host != "::1" {
		t.Skipf("rabbitmqctl manages the broker on this machine, and AMQP_URL names %s", uri.Host)
	}
	user, password := uniqueName(t, "user"), uuid.NewString()
	rabbitmqctl(t, "add_user", user, password)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "-q", "delete_user", user).Run() })
	rabbitmqctl(t, "set_permissions", "-p", uri.Vhost, user, "^$", writeRe, "^$")
	for _, args := range more {
		args = append(args[:1:1], append([]string{"-p", uri.Vhost, user}, args[1:]...)...)
		rabbitmqctl(t, args...)
	}
	uri.Username, uri.Password = user, password
	return uri.String()
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.CommandContext(runContext(t), "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	require.NoError(t, err, "rabbitmqctl %s: %s", args[0], out)
}

// TestAccessRefused: a publish the broker refuses with 403 ACCESS_REFUSED
// (the user may not write to the exchange) fails permanently, naming the
// exchange; a message to an allowed exchange sent before it succeeds or,
// when the 403 closed the channel before its confirm, is retried; one
// sent after it on the channel the 403 closed is an outage,
// retried, not permanent; the same Publisher then publishes to the
// allowed exchange again.
func TestAccessRefused(t *testing.T) {
	t.Parallel()
	ctx := runContext(t)
	a := newAdmin(t)
	allowed, refused := a.exchange(t), a.exchange(t)
	q := a.queue(t, allowed, "#", nil)
	a.queue(t, refused, "#", nil)
	url := restrictedUser(t, "^"+regexp.QuoteMeta(allowed)+"$")
	p := newPublisher(t, amqppub.Config{URL: url, RouteFunc: func(rp amqppub.RouteParams) (amqppub.Route, error) {
		return amqppub.Route{Exchange: rp.Destination, RoutingKey: "k"}, nil
	}})
	msgs := []outbox.Message{messages(allowed, 1)[0], messages(refused, 1)[0], messages(allowed, 1)[0]}
	errs := p.Publish(ctx, msgs)
	if errs[0] != nil { // the 403 may close the channel before the queue confirmed it
		require.False(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
	}
	require.ErrorIs(t, errs[1], amqppub.ErrAccessRefused)
	require.True(t, outbox.IsPermanent(errs[1]), "%v", errs[1])
	require.ErrorContains(t, errs[1], refused)
	requireClean(t, errs[1])
	require.Error(t, errs[2])
	require.False(t, outbox.IsPermanent(errs[2]), "%v", errs[2])
	require.NotErrorIs(t, errs[2], amqppub.ErrAccessRefused)

	before := depth(t, a, q)
	for _, err := range p.Publish(ctx, messages(allowed, 2)) {
		require.NoError(t, err)
	}
	require.Equal(t, before+2, depth(t, a, q))
}

// TestAccessRefusedDefaultExchange: RabbitMQ names the default exchange
// "amq.default" in its 403; a publish to it without write permission
// fails permanently too.
func TestAccessRefusedDefaultExchange(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := a.queue(t, "", "", nil)
	p := newPublisher(t, amqppub.Config{URL: restrictedUser(t, "^$")})
	err := p.Publish(runContext(t), messages(q, 1))[0]
	require.ErrorIs(t, err, amqppub.ErrAccessRefused)
	require.True(t, outbox.IsPermanent(err), "%v", err)
	require.Equal(t, 0, depth(t, a, q))
}

// TestAccessRefusedTopic: with topic permissions, RabbitMQ refuses a
// routing key, not the exchange; the 403 fails that message permanently
// and not a message to the same exchange with an allowed routing key sent
// after it on the channel the 403 closed, which is retried.
func TestAccessRefusedTopic(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	x := a.exchange(t)
	q := a.queue(t, x, "#", nil)
	url := restrictedUser(t, "^"+regexp.QuoteMeta(x)+"$",
		[]string{"set_topic_permissions", x, "^orders\\.", "^$"})
	p := newPublisher(t, amqppub.Config{URL: url, Exchange: x})
	msgs := []outbox.Message{messages("admin.x", 1)[0], messages("orders.y", 1)[0]}
	errs := p.Publish(runContext(t), msgs)
	require.ErrorIs(t, errs[0], amqppub.ErrAccessRefused)
	require.True(t, outbox.IsPermanent(errs[0]), "%v", errs[0])
	require.ErrorContains(t, errs[0], "admin.x")
	require.Error(t, errs[1])
	require.False(t, outbox.IsPermanent(errs[1]), "%v", errs[1])

	require.NoError(t, p.Publish(runContext(t), messages("orders.y", 1))[0])
	require.Equal(t, 1, depth(t, a, q))
}

// TestAccessRefusedBackendError: RabbitMQ answers a permission check its
// authorization backend (LDAP, HTTP, OAuth 2) could not make, the backend
// being down, with the 403 of a denial plus ", backend M returned an
// error: E" (rabbit_access_control:check_access). That is an outage:
// the message is retried, not FAILED as a denied publish is.
func TestAccessRefusedBackendError(t *testing.T) {
	t.Parallel()
	r := amqppub.Route{Exchange: "orders", RoutingKey: "order.created"}
	denied := "ACCESS_REFUSED - write access to exchange 'orders' in vhost '/' refused for user 'u'"
	err := amqppub.ClassifyClose(r, &amqp.Error{Code: amqp.AccessRefused, Reason: denied})
	require.ErrorIs(t, err, amqppub.ErrAccessRefused)
	require.True(t, outbox.IsPermanent(err), "%v", err)

	// RabbitMQ cuts a reply text past 255 bytes to 252 and "..."
	// (rabbit_binary_generator): a long user name hides the backend's
	// error, so a cut 403 cannot be told a denial and is retried.
	long := denied[:len(denied)-1] + strings.Repeat("u", 200) + "', backend rabbit_auth_backend_http returned an error: timeout"
	for _, reason := range []string{
		denied + ", backend rabbit_auth_backend_http returned an error: {failed_connect,econnrefused}",
		long[:252] + "...",
		"ACCESS_REFUSED - write access to topic 'order.created' in exchange 'orders' in vhost '/' refused for user 'u', " +
			"backend rabbit_auth_backend_ldap returned an error: ldap_connect_error",
	} {
		err := amqppub.ClassifyClose(r, &amqp.Error{Code: amqp.AccessRefused, Reason: reason})
		require.NotErrorIs(t, err, amqppub.ErrAccessRefused, reason)
		require.False(t, outbox.IsPermanent(err), "%v", err)
		require.True(t, outbox.IsUnavailable(err), "%v", err)
		require.ErrorIs(t, err, amqppub.ErrConnection)
	}
}
