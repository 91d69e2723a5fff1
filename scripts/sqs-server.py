"""moto's server (`moto_server`'s application), made safe under concurrent requests, with four
of its costs removed, and, as SQS does, a visibility change taken only with a message's latest
receipt handle.

moto's SQS is not safe when requests run at once: a DeleteMessage rebuilds the queue's list of
messages without the queue's lock, so a message a concurrent SendMessage appended meanwhile
is lost (the soak saw 3 of 3,000 vanish: sent, answered 200, never received), and two
ReceiveMessage calls can walk the same visible messages together. Here each queue's
ReceiveMessage and DeleteMessage hold the queue's own lock (the one SendMessage takes); a long
poll releases it while it waits, as moto's wait does.

moto's SQS read the clock through datetime arithmetic for every message of a queue on every
call (`unix_time`), listed its own package directory on every request
(`list_of_moto_modules`), and computed every queue attribute, message counts included, for
each message it handed out (to read the queue's retention period). A soak's queue holds
hundreds of messages in flight, so a call cost milliseconds per message and the server fell
behind at 40 requests a second. Here the clock is `time.time()` (the same value), the
directory is listed once (the package does not change while it runs), and the retention period
is read from the queue itself (the attribute it would have returned). And moto_server's
HTTP server (werkzeug's development server) closes every connection and starts a thread for
each: under a soak's load, accepting alone took seconds. Here moto's application is served by
waitress, with keep-alive connections and a pool of threads. Sending, receiving, visibility,
receive counts and the dead-letter redrive are moto's own.

    python scripts/sqs-server.py -H 127.0.0.1 -p 9324
"""

import argparse
import os
import sys
import threading
import time

import moto.backends as backends
import moto.core.utils as utils
import moto.sqs.models as sqs_models

_unix_time = utils.unix_time


def unix_time(dt=None):
    return time.time() if dt is None else _unix_time(dt)


def unix_time_millis(dt=None):
    return unix_time(dt) * 1000.0


for module in (utils, sqs_models):
    module.unix_time = unix_time
    module.unix_time_millis = unix_time_millis

_modules = tuple(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: _modules


def is_message_valid_based_on_retention_period(self, queue_name, message):
    queue = self.get_queue(queue_name)
    return queue.message_retention_period + message.sent_timestamp / 1000 > unix_time()


sqs_models.SQSBackend.is_message_valid_based_on_retention_period = (
    is_message_valid_based_on_retention_period
)


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=9324)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))

    import waitress
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    app = DomainDispatcherApplication(create_backend_app)
    # Threads: each long poll (a worker's ReceiveMessage, up to 20 s) holds one.
    waitress.serve(app, host=args.host, port=args.port, threads=32, connection_limit=1000,
                   channel_timeout=300, ident="moto")


def delete_message(self, receipt_handle):
    """moto's Queue.delete_message in one pass, in place, under the queue's lock: every message
    that had this receipt handle goes (moto's walked the queue twice and rebuilt it unlocked)."""
    with self._messages_lock:
        if receipt_handle in self.deleted_messages:
            return  # deleted already: moto takes it again without an error
        gone = [m for m in self._messages if m.had_receipt_handle(receipt_handle)]
        if not gone:
            raise sqs_models.ReceiptHandleIsInvalid()
        for message in gone:
            self.pending_messages.discard(message)
            self.deleted_messages.update(message.all_receipt_handles)
            self._messages.remove(message)


sqs_models.Queue.delete_message = delete_message

# A queue's attributes (which moto computes for every SendMessage, for one FIFO setting) count
# the messages visible, in flight and delayed: one pass for the three, not five.
_counts = threading.local()
_attributes = sqs_models.Queue.attributes.fget


def attributes(self):
    now = unix_time_millis()
    visible = not_visible = delayed = 0
    for m in self._messages:
        is_visible, is_delayed = now > m.visible_at, now < m.delayed_until
        not_visible += not is_visible
        delayed += is_delayed
        visible += is_visible and not is_delayed
    _counts.of = (self, visible, not_visible, delayed)
    try:
        return _attributes(self)
    finally:
        _counts.of = None


def counted(index, original):
    def count(self):
        of = getattr(_counts, "of", None)
        return of[index] if of and of[0] is self else original(self)

    return property(count)


for _index, _name in enumerate(
    ["approximate_number_of_messages", "approximate_number_of_messages_not_visible",
     "approximate_number_of_messages_delayed"], start=1):
    setattr(sqs_models.Queue, _name, counted(_index, getattr(sqs_models.Queue, _name).fget))
sqs_models.Queue.attributes = property(attributes)

_receive_message = sqs_models.SQSBackend.receive_message


def receive_message(self, queue_name, *args, **kwargs):
    # The queue's Condition is built on an RLock: its wait (the long poll) releases it.
    with self.get_queue(queue_name)._messages_lock:
        return _receive_message(self, queue_name, *args, **kwargs)


sqs_models.SQSBackend.receive_message = receive_message


def change_message_visibility(self, queue_name, receipt_handle, visibility_timeout):
    """As SQS: a message's visibility is changed only with the receipt handle of its latest
    receive ("you must provide the most recently received receipt handle"); an earlier one's
    change is refused, ReceiptHandleIsInvalid (moto took any handle the message ever had, so a
    consumer holding a stale handle could hide or show a message another consumer has since
    received). Otherwise moto's own."""
    queue = self.get_queue(queue_name)
    with queue._messages_lock:
        for message in queue._messages:
            if message.had_receipt_handle(receipt_handle):
                if message.receipt_handle != receipt_handle:
                    raise sqs_models.ReceiptHandleIsInvalid()
                break
    return _change_message_visibility(self, queue_name, receipt_handle, visibility_timeout)


_change_message_visibility = sqs_models.SQSBackend.change_message_visibility
sqs_models.SQSBackend.change_message_visibility = change_message_visibility


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
