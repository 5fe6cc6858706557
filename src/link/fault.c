/* Send-side fault injection (fault.h). Off the hot path: only runs when
 * URVT_FAULT is set, under one mutex. */
#include "link/fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/compiler.h"
#include "base/progress.h"
#include "base/timer.h"

#define HOLD_SLOTS 2048
#define HOLD_BYTES 4352
#define DST_BYTES 28

struct hold {
	uint64_t due_ns;                  /* when it leaves */
	uint32_t len, dstlen;
	uint8_t dst[DST_BYTES];
	uint8_t data[HOLD_BYTES];
};

struct urvt_fault {
	struct urvt_fault_cfg cfg;
	struct urvt_progress *p;
	urvt_fault_send_fn send;
	void *arg;
	pthread_mutex_t lock;             /* rng, slots, timer arming */
	uint64_t rng;
	struct urvt_timer timer;
	uint32_t nheld;                   /* entries in heap */
	uint32_t nfree;                   /* entries in free_slots */
	struct hold *slots;
	uint32_t heap[HOLD_SLOTS];        /* held slots, a min-heap on due_ns */
	uint32_t free_slots[HOLD_SLOTS];
};

static double parse_prob(const char *v, bool *ok)
{
	char *end;
	double d = strtod(v, &end);

	if (end == v || *end || !(d >= 0 && d <= 1)) /* NaN fails too */
		*ok = false;
	return d;
}

/* A whole unsigned decimal/hex number, nothing after it. */
static uint64_t parse_uint(const char *v, uint64_t max, bool *ok)
{
	char *end;
	unsigned long long u;

	errno = 0;
	u = strtoull(v, &end, 0);
	if (end == v || *end || *v == '-' || errno || u > max)
		*ok = false;
	return u;
}

int urvt_fault_parse(const char *spec, struct urvt_fault_cfg *cfg)
{
	char buf[256], *rest, *tok;
	bool ok = true;

	memset(cfg, 0, sizeof(*cfg));
	cfg->seed = 1;
	if (!spec || !*spec)
		return 0;
	if (strlen(spec) >= sizeof(buf))
		ok = false;
	else
		memcpy(buf, spec, strlen(spec) + 1);
	/* strsep keeps empty fields: "drop=0.1,," is a typo, not a spec */
	for (rest = buf; ok && (tok = strsep(&rest, ","));) {
		char *eq = strchr(tok, '=');
		if (!eq) {
			ok = false;
			break;
		}
		*eq++ = 0;
		if (!strcmp(tok, "drop"))
			cfg->drop = parse_prob(eq, &ok);
		else if (!strcmp(tok, "dup"))
			cfg->dup = parse_prob(eq, &ok);
		else if (!strcmp(tok, "reorder"))
			cfg->reorder = parse_prob(eq, &ok);
		else if (!strcmp(tok, "corrupt"))
			cfg->corrupt = parse_prob(eq, &ok);
		else if (!strcmp(tok, "delay_us"))
			cfg->delay_us = (uint32_t)parse_uint(eq, 10000000, &ok);
		else if (!strcmp(tok, "seed"))
			cfg->seed = parse_uint(eq, UINT64_MAX, &ok);
		else
			ok = false;
		if (!ok)
			break;
	}
	if (!ok) {
		fprintf(stderr, "urvt: URVT_FAULT=\"%s\": expected drop=P,dup=P,reorder=P,"
				"corrupt=P,delay_us=N,seed=S with 0 <= P <= 1\n", spec);
		return -EINVAL;
	}
	if (!cfg->seed)
		cfg->seed = 1;
	return 0;
}

bool urvt_fault_active(const struct urvt_fault_cfg *cfg)
{
	return cfg->drop > 0 || cfg->dup > 0 || cfg->reorder > 0 || cfg->corrupt > 0 ||
	       cfg->delay_us > 0;
}

/* xorshift64*: caller holds f->lock */
static uint64_t rnd(struct urvt_fault *f)
{
	f->rng ^= f->rng >> 12;
	f->rng ^= f->rng << 25;
	f->rng ^= f->rng >> 27;
	return f->rng * 0x2545F4914F6CDD1Dull;
}

static bool chance(struct urvt_fault *f, double p)
{
	if (p <= 0)
		return false;
	return (double)(rnd(f) >> 11) * (1.0 / 9007199254740992.0) < p;
}

/* Held packets leave in due order: a binary min-heap of slot indices keeps
 * hold and release O(log n) at any packet rate. Caller holds f->lock. */
static uint64_t due(const struct urvt_fault *f, uint32_t k)
{
	return f->slots[f->heap[k]].due_ns;
}

static void heap_swap(struct urvt_fault *f, uint32_t a, uint32_t b)
{
	uint32_t t = f->heap[a];

	f->heap[a] = f->heap[b];
	f->heap[b] = t;
}

static void heap_push(struct urvt_fault *f, uint32_t slot)
{
	uint32_t k = f->nheld++;

	f->heap[k] = slot;
	while (k && due(f, (k - 1) / 2) > due(f, k)) {
		heap_swap(f, k, (k - 1) / 2);
		k = (k - 1) / 2;
	}
}

static uint32_t heap_pop(struct urvt_fault *f)
{
	uint32_t top = f->heap[0], k = 0;

	f->heap[0] = f->heap[--f->nheld];
	for (;;) {
		uint32_t l = 2 * k + 1, r = l + 1, m = k;
		if (l < f->nheld && due(f, l) < due(f, m))
			m = l;
		if (r < f->nheld && due(f, r) < due(f, m))
			m = r;
		if (m == k)
			break;
		heap_swap(f, k, m);
		k = m;
	}
	return top;
}

/* Send the held packets due by now (all: every one). Caller holds f->lock. */
static void release_locked(struct urvt_fault *f, uint64_t now, bool all)
{
	while (f->nheld && (all || due(f, 0) <= now)) {
		uint32_t slot = heap_pop(f);
		struct hold *h = &f->slots[slot];
		f->send(f->arg, h->data, h->len, h->dst, h->dstlen);
		f->free_slots[f->nfree++] = slot;
	}
}

static void release_due(struct urvt_fault *f, bool all)
{
	pthread_mutex_lock(&f->lock);
	release_locked(f, urvt_now_ns(), all);
	if (!all && f->nheld)
		urvt_timer_mod(f->p, &f->timer, due(f, 0));
	pthread_mutex_unlock(&f->lock);
}

static void fault_timer_fn(struct urvt_timer *t)
{
	release_due(container_of(t, struct urvt_fault, timer), false);
}

struct urvt_fault *urvt_fault_create(const struct urvt_fault_cfg *cfg, struct urvt_progress *p,
				     urvt_fault_send_fn send, void *arg)
{
	struct urvt_fault *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->slots = calloc(HOLD_SLOTS, sizeof(*f->slots));
	if (!f->slots) {
		free(f);
		return NULL;
	}
	for (uint32_t i = 0; i < HOLD_SLOTS; i++)
		f->free_slots[i] = HOLD_SLOTS - 1 - i;
	f->nfree = HOLD_SLOTS;
	f->cfg = *cfg;
	f->p = p;
	f->send = send;
	f->arg = arg;
	f->rng = cfg->seed * 0x9E3779B97F4A7C15ull + 1;
	pthread_mutex_init(&f->lock, NULL);
	urvt_timer_init(&f->timer, fault_timer_fn);
	return f;
}

void urvt_fault_destroy(struct urvt_fault *f)
{
	if (!f)
		return;
	urvt_timer_del_sync(f->p, &f->timer);
	release_due(f, true);
	pthread_mutex_destroy(&f->lock);
	free(f->slots);
	free(f);
}

enum urvt_fault_verdict urvt_fault_apply(struct urvt_fault *f, uint8_t *buf, uint32_t len,
					 const void *dst, uint32_t dstlen, unsigned *flags)
{
	enum urvt_fault_verdict v = URVT_FAULT_PASS;
	uint64_t delay_ns = 0;

	*flags = 0;
	pthread_mutex_lock(&f->lock);
	if (chance(f, f->cfg.drop)) {
		*flags |= URVT_FAULT_F_DROP;
		pthread_mutex_unlock(&f->lock);
		return URVT_FAULT_DROP;
	}
	if (len && chance(f, f->cfg.corrupt)) {
		/* flip one bit of a covered byte: the ICRC no longer matches */
		buf[rnd(f) % len] ^= (uint8_t)(1u << (rnd(f) & 7));
		*flags |= URVT_FAULT_F_CORRUPT;
	}
	if (chance(f, f->cfg.dup)) {
		*flags |= URVT_FAULT_F_DUP;
		v = URVT_FAULT_DUP;
	}
	if (chance(f, f->cfg.reorder)) {
		*flags |= URVT_FAULT_F_REORDER;
		delay_ns += 20000 + rnd(f) % 480000;
	}
	if (f->cfg.delay_us) {
		*flags |= URVT_FAULT_F_DELAY;
		delay_ns += (uint64_t)f->cfg.delay_us * 1000;
	}
	if (delay_ns && len <= HOLD_BYTES && dstlen <= DST_BYTES) {
		uint64_t now = urvt_now_ns();
		uint32_t slot;
		struct hold *h;

		/* the sender releases what is due itself (the timer may run
		 * late on a busy machine); a full queue lets its earliest
		 * packet go early rather than this one overtake it */
		release_locked(f, now, false);
		if (!f->nfree) {
			slot = heap_pop(f);
			h = &f->slots[slot];
			f->send(f->arg, h->data, h->len, h->dst, h->dstlen);
			f->free_slots[f->nfree++] = slot;
		}
		slot = f->free_slots[--f->nfree];
		h = &f->slots[slot];
		h->due_ns = now + delay_ns;
		h->len = len;
		h->dstlen = dstlen;
		memcpy(h->dst, dst, dstlen);
		memcpy(h->data, buf, len);
		heap_push(f, slot);
		/* the timer follows the earliest packet */
		if (f->heap[0] == slot)
			urvt_timer_mod(f->p, &f->timer, h->due_ns);
		/* a held duplicate: the original goes now, the copy later */
		v = v == URVT_FAULT_DUP ? URVT_FAULT_PASS : URVT_FAULT_HELD;
	}
	pthread_mutex_unlock(&f->lock);
	return v;
}
