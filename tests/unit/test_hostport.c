/* Unit tests for fx_hostport: "host:port" and "[ipv6]:port" splitting. */
/* fx-test-libs: fx_base */
#include "base/hostport.h"

#include <string.h>

#include "felix/error.h"
#include "fx_test.h"

static void expect_ok(const char *s, const char *host, unsigned port, bool bracketed)
{
    fx_hostport hp;
    const char *why = NULL;
    if (fx_hostport_split(s, &hp, &why) != 0)
        fail_msg("'%s' refused: %s", s, why);
    assert_string_equal(hp.host, host);
    assert_int_equal(hp.port, port);
    assert_int_equal(hp.bracketed, bracketed);
    char back[300];
    fx_hostport_format(&hp, hp.port, back, sizeof(back));
    assert_string_equal(back, s);
}

static void expect_refused(const char *s, const char *why_has)
{
    fx_hostport hp;
    const char *why = NULL;
    assert_int_equal(fx_hostport_split(s, &hp, &why), FX_ECONFIG);
    assert_non_null(why);
    if (strstr(why, why_has) == NULL)
        fail_msg("'%s': '%s' lacks '%s'", s ? s : "(null)", why, why_has);
}

static void test_splits_names_ipv4_and_bracketed_ipv6(void **state)
{
    expect_ok("127.0.0.1:5000", "127.0.0.1", 5000, false);
    expect_ok("broker.example.com:0", "broker.example.com", 0, false);
    expect_ok("localhost:65535", "localhost", 65535, false);
    expect_ok("[::1]:8080", "::1", 8080, true);
    expect_ok("[::]:0", "::", 0, true);
}

static void test_refuses_malformed_addresses_with_the_reason(void **state)
{
    expect_refused(NULL, "expected host:port");
    expect_refused("127.0.0.1", "expected host:port");
    expect_refused(":8080", "expected host:port");
    expect_refused("[::1:8080", "expected host:port");
    expect_refused("[::1]8080", "expected host:port");
    expect_refused("[]:80", "expected host:port");
    expect_refused("::1:8080", "IPv6 addresses go in [ ]");
    expect_refused("[nonsense]:8080", "not an IPv6 address");
    expect_refused("h:", "port must be a number");
    expect_refused("h:65536", "port must be a number");
    expect_refused("h:80x", "port must be a number");
    expect_refused("h:-1", "port must be a number");
    expect_refused("h:+80", "port must be a number");
    expect_refused("h:000080", "port must be a number");
    char longhost[300];
    memset(longhost, 'a', 256);
    strcpy(longhost + 256, ":1");
    expect_refused(longhost, "host too long");
}

/* The format writes another port with the same host and brackets. */
static void test_format_keeps_the_brackets_with_another_port(void **state)
{
    fx_hostport hp;
    assert_int_equal(fx_hostport_split("[::1]:9000", &hp, NULL), 0);
    char buf[64];
    fx_hostport_format(&hp, 9001, buf, sizeof(buf));
    assert_string_equal(buf, "[::1]:9001");
    assert_int_equal(fx_hostport_split("0.0.0.0:9000", &hp, NULL), 0);
    fx_hostport_format(&hp, 9001, buf, sizeof(buf));
    assert_string_equal(buf, "0.0.0.0:9001");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_splits_names_ipv4_and_bracketed_ipv6),
    cmocka_unit_test(test_refuses_malformed_addresses_with_the_reason),
    cmocka_unit_test(test_format_keeps_the_brackets_with_another_port),
};
FX_TEST_MAIN(tests)
