/* The gateway's answer sender: a thread of its own, without the GIL, that sends the epoll loop's answers.

Why: on loopback the kernel does both ends' TCP work inside send() (the receiver's delivery and its wake-up), about a
fifth of the loop thread's time per request under the storm (bench/bench_gateway_rfc.py). A Python thread cannot
take that over: it needs the GIL back after every send(), and handing the GIL to and fro costs more than the send.
This thread never touches a Python object. The loop hands it copies of the bytes (send), the end of a connection
(close), and wakes it once per loop turn (flush); it reports back through an eventfd only what it could not do.

Order and ownership: one FIFO for every connection, so a connection's answers leave in the order they were handed
over, and its descriptor is closed here, after its last answer: the number cannot name another connection while an
answer for the old one is queued. A send the socket does not take whole (a client that does not read) holds that
descriptor: the rest of that answer and everything after it for the same descriptor go back to the loop, in order,
tagged with the connection's id. The loop then queues a fence for it (fence) and writes what came back itself, once
the fence comes back too: nothing queued before the fence can come back after it, so the answers stay in order. A
send that fails (the peer reset) drops what follows for that descriptor and reports the errno. Both holds end with
the close.

Python API (host_client/gateway/server.py is the only user): Sender(); .send(fd, data, tag); .close(fd);
.fence(fd, tag); .flush(); .returned() -> [(fd, tag, errno, bytes)]; .fileno() (the eventfd the loop polls); .stop();
.queued (items handed over and not yet done); .enqueued, .done (items handed over and done since the start: one
FIFO, so item n is done once done >= n); .sent, .held, .failed (counters).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

enum { OP_SEND = 0, OP_CLOSE = 1, OP_FENCE = 2 };
enum { FREE = 0, HELD = 1, FAILED = 2 };

typedef struct Item {
    struct Item *next;
    int fd;
    int op;
    unsigned long long tag;
    size_t len;
    char data[];
} Item;

typedef struct Ret {
    struct Ret *next;
    int fd;
    int err;                       /* 0: data is what the socket did not take; -1: a fence; else an errno */
    unsigned long long tag;
    size_t len;
    char data[];
} Ret;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Item *head, *tail;             /* handed over; the thread takes the whole list at once */
    Ret *ret_head, *ret_tail;
    int efd;
    int stopping;
    int running;
    int waiting;                   /* the thread sleeps on cv */
    int signal;                    /* items arrived since the last flush */
    pthread_t th;
    unsigned char *state;          /* per descriptor: FREE, HELD, FAILED (the thread's own, no lock) */
    size_t nstate;
    Py_ssize_t queued;             /* under mu */
    unsigned long long enqueued, done;       /* under mu: items handed over / done since the start (FIFO) */
    unsigned long long sent, held, failed;   /* under mu */
} Sender;

static int
grow_state(Sender *s, int fd)
{
    if ((size_t)fd < s->nstate)
        return 0;
    size_t n = s->nstate ? s->nstate : 1024;
    while (n <= (size_t)fd)
        n *= 2;
    unsigned char *p = realloc(s->state, n);
    if (p == NULL)
        return -1;
    memset(p + s->nstate, FREE, n - s->nstate);
    s->state = p;
    s->nstate = n;
    return 0;
}

static void
give_back(Sender *s, Item *it, size_t off, int err)
{
    size_t n = err ? 0 : it->len - off;     /* a fence and an error carry no data */
    Ret *r = malloc(sizeof(Ret) + n);
    if (r == NULL) {
        /* Nothing can be handed back: report the descriptor as failed without data (the loop closes it). */
        r = malloc(sizeof(Ret));
        if (r == NULL)
            return;
        err = ENOMEM;
        n = 0;
    }
    r->next = NULL;
    r->fd = it->fd;
    r->err = err;
    r->tag = it->tag;
    r->len = n;
    if (n)
        memcpy(r->data, it->data + off, n);
    pthread_mutex_lock(&s->mu);
    if (s->ret_tail)
        s->ret_tail->next = r;
    else
        s->ret_head = r;
    s->ret_tail = r;
    pthread_mutex_unlock(&s->mu);
    uint64_t one = 1;
    ssize_t w;
    do {
        w = write(s->efd, &one, sizeof one);
    } while (w < 0 && errno == EINTR);
}

static void
do_item(Sender *s, Item *it, unsigned long long *sent, unsigned long long *held, unsigned long long *failed)
{
    int fd = it->fd;
    if (grow_state(s, fd) < 0) {
        /* no room to remember a hold: nothing is sent on this descriptor, so nothing leaves out of order */
        if (it->op == OP_CLOSE)
            close(fd);
        else
            give_back(s, it, 0, ENOMEM);
        return;
    }
    unsigned char st = s->state[fd];
    if (it->op == OP_FENCE) {
        give_back(s, it, 0, -1);
        return;
    }
    if (it->op == OP_CLOSE) {
        s->state[fd] = FREE;
        close(fd);
        return;
    }
    if (st == FAILED)
        return;
    if (st == HELD) {
        give_back(s, it, 0, 0);
        return;
    }
    size_t off = 0;
    while (off < it->len) {
        ssize_t n = send(fd, it->data + off, it->len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            s->state[fd] = FAILED;
            (*failed)++;
            give_back(s, it, 0, errno);
            return;
        }
        off += (size_t)n;
    }
    if (off < it->len) {
        s->state[fd] = HELD;
        (*held)++;
        give_back(s, it, off, 0);
        return;
    }
    (*sent)++;
}

static void *
run(void *arg)
{
    Sender *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->head == NULL && !s->stopping) {
            s->waiting = 1;
            pthread_cond_wait(&s->cv, &s->mu);
            s->waiting = 0;
        }
        if (s->head == NULL)
            break;                                  /* stopping, and everything handed over is done */
        Item *it = s->head;
        s->head = s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        unsigned long long sent = 0, held = 0, failed = 0;
        Py_ssize_t done = 0;
        while (it) {
            Item *next = it->next;
            do_item(s, it, &sent, &held, &failed);
            free(it);
            done++;
            it = next;
        }
        pthread_mutex_lock(&s->mu);
        s->queued -= done;
        s->done += (unsigned long long)done;
        s->sent += sent;
        s->held += held;
        s->failed += failed;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int
enqueue(Sender *s, int fd, int op, unsigned long long tag, const char *data, size_t len)
{
    Item *it = malloc(sizeof(Item) + len);
    if (it == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    it->next = NULL;
    it->fd = fd;
    it->op = op;
    it->tag = tag;
    it->len = len;
    if (len)
        memcpy(it->data, data, len);
    pthread_mutex_lock(&s->mu);
    if (s->tail)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    s->queued++;
    s->enqueued++;
    s->signal = 1;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int
as_fd(PyObject *o)
{
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "not a file descriptor");
        return -1;
    }
    return (int)v;
}

static int
check_open(Sender *s)
{
    if (!s->running || s->stopping) {
        PyErr_SetString(PyExc_ValueError, "the sender is stopped");
        return -1;
    }
    return 0;
}

/* fd and tag, the first and the tag_at'th argument; -1 with an exception set when either is not one */
static int
fd_and_tag(Sender *s, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, Py_ssize_t tag_at, const char *usage,
           unsigned long long *tag)
{
    if (nargs != want) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    int fd = as_fd(args[0]);
    if (fd < 0)
        return -1;
    *tag = PyLong_AsUnsignedLongLong(args[tag_at]);
    if (*tag == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (check_open(s) < 0)
        return -1;
    return fd;
}

static PyObject *
Sender_send(Sender *s, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned long long tag;
    int fd = fd_and_tag(s, args, nargs, 3, 2, "send(fd, data, tag)", &tag);
    if (fd < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int rc = enqueue(s, fd, OP_SEND, tag, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Sender_close(Sender *s, PyObject *arg)
{
    int fd = as_fd(arg);
    if (fd < 0)
        return NULL;
    if (check_open(s) < 0)
        return NULL;
    if (enqueue(s, fd, OP_CLOSE, 0, NULL, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Sender_fence(Sender *s, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned long long tag;
    int fd = fd_and_tag(s, args, nargs, 2, 1, "fence(fd, tag)", &tag);
    if (fd < 0)
        return NULL;
    if (enqueue(s, fd, OP_FENCE, tag, NULL, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Sender_flush(Sender *s, PyObject *Py_UNUSED(ignored))
{
    pthread_mutex_lock(&s->mu);
    if (s->signal && s->waiting)
        pthread_cond_signal(&s->cv);
    s->signal = 0;
    pthread_mutex_unlock(&s->mu);
    Py_RETURN_NONE;
}

static void
put_back(Sender *s, Ret *list)
{
    /* what could not be handed to Python now goes back in front, in order, for the next call */
    if (list == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    Ret *last = list;
    while (last->next)
        last = last->next;
    last->next = s->ret_head;
    if (s->ret_head == NULL)
        s->ret_tail = last;
    s->ret_head = list;
    pthread_mutex_unlock(&s->mu);
    uint64_t one = 1;
    (void)!write(s->efd, &one, sizeof one);
}

static PyObject *
Sender_returned(Sender *s, PyObject *Py_UNUSED(ignored))
{
    uint64_t n;
    ssize_t r;
    do {
        r = read(s->efd, &n, sizeof n);     /* non-blocking: EAGAIN when nothing was reported */
    } while (r < 0 && errno == EINTR);
    pthread_mutex_lock(&s->mu);
    Ret *list = s->ret_head;
    s->ret_head = s->ret_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        put_back(s, list);
        return NULL;
    }
    for (Ret *r = list; r; r = r->next) {
        PyObject *t = Py_BuildValue("(iKiy#)", r->fd, r->tag, r->err, r->data, (Py_ssize_t)r->len);
        if (t == NULL || PyList_Append(out, t) < 0) {
            /* MemoryError: nothing is lost, the whole list waits for the next call */
            Py_XDECREF(t);
            Py_DECREF(out);
            put_back(s, list);
            return NULL;
        }
        Py_DECREF(t);
    }
    while (list) {
        Ret *next = list->next;
        free(list);
        list = next;
    }
    return out;
}

static PyObject *
Sender_fileno(Sender *s, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(s->efd);
}

static void
stop_thread(Sender *s)
{
    if (!s->running)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(s->th, NULL);
    Py_END_ALLOW_THREADS
    s->running = 0;
}

static PyObject *
Sender_stop(Sender *s, PyObject *Py_UNUSED(ignored))
{
    /* everything handed over is sent (or closed) first, then the thread ends */
    stop_thread(s);
    Py_RETURN_NONE;
}

static PyObject *
Sender_get_counter(Sender *s, void *which)
{
    pthread_mutex_lock(&s->mu);
    long long v;
    switch ((intptr_t)which) {
    case 0: v = (long long)s->queued; break;
    case 1: v = (long long)s->sent; break;
    case 2: v = (long long)s->held; break;
    case 4: v = (long long)s->enqueued; break;
    case 5: v = (long long)s->done; break;
    default: v = (long long)s->failed; break;
    }
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLongLong(v);
}

static PyObject *
Sender_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist))
        return NULL;
    Sender *s = (Sender *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    s->efd = -1;
    if (pthread_mutex_init(&s->mu, NULL) != 0 || pthread_cond_init(&s->cv, NULL) != 0) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    int rc = pthread_create(&s->th, NULL, run, s);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    s->running = 1;
    return (PyObject *)s;
}

static void
Sender_dealloc(Sender *s)
{
    stop_thread(s);
    Item *it = s->head;
    while (it) {
        Item *n = it->next;
        free(it);
        it = n;
    }
    Ret *r = s->ret_head;
    while (r) {
        Ret *n = r->next;
        free(r);
        r = n;
    }
    free(s->state);
    if (s->efd >= 0)
        close(s->efd);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef Sender_methods[] = {
    {"send", (PyCFunction)(void (*)(void))Sender_send, METH_FASTCALL,
     "send(fd, data, tag): queue a copy of data for fd; tag names the connection in what comes back"},
    {"close", (PyCFunction)Sender_close, METH_O, "close(fd): close fd once everything queued before is done"},
    {"fence", (PyCFunction)(void (*)(void))Sender_fence, METH_FASTCALL,
     "fence(fd, tag): comes back from returned() as (fd, tag, -1, b'') once everything queued before it is done"},
    {"flush", (PyCFunction)Sender_flush, METH_NOARGS, "wake the thread for what was queued since the last flush"},
    {"returned", (PyCFunction)Sender_returned, METH_NOARGS,
     "[(fd, tag, errno, data)]: what could not be sent (errno 0: data the socket did not take; -1: a fence), "
     "in order"},
    {"fileno", (PyCFunction)Sender_fileno, METH_NOARGS, "the eventfd that turns readable when returned() has more"},
    {"stop", (PyCFunction)Sender_stop, METH_NOARGS, "send what is queued, then end the thread"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Sender_getset[] = {
    {"queued", (getter)Sender_get_counter, NULL, "items handed over, not yet done", (void *)0},
    {"sent", (getter)Sender_get_counter, NULL, "answers sent whole", (void *)1},
    {"held", (getter)Sender_get_counter, NULL, "sends the socket did not take whole", (void *)2},
    {"failed", (getter)Sender_get_counter, NULL, "sends that failed (the peer went away)", (void *)3},
    {"enqueued", (getter)Sender_get_counter, NULL, "items handed over since the start (the last one's number)",
     (void *)4},
    {"done", (getter)Sender_get_counter, NULL, "items done since the start: every item numbered up to it is done",
     (void *)5},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "host_client.gateway._nativesend.Sender",
    .tp_basicsize = sizeof(Sender),
    .tp_dealloc = (destructor)Sender_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A thread that sends the epoll loop's answers without the GIL (see the module's source).",
    .tp_methods = Sender_methods,
    .tp_getset = Sender_getset,
    .tp_new = Sender_new,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_nativesend", "The gateway's answer sender (a thread without the GIL).", -1, NULL, NULL, NULL,
    NULL, NULL,
};

PyMODINIT_FUNC
PyInit__nativesend(void)
{
    if (PyType_Ready(&SenderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SenderType);
    if (PyModule_AddObject(m, "Sender", (PyObject *)&SenderType) < 0) {
        Py_DECREF(&SenderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
