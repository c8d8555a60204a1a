// One background thread running tasks in FIFO order: where a Communicator runs its async
// collectives, so their Works complete in submission order. The thread starts with the first task.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dtrain::comm {

class TaskQueue {
 public:
  TaskQueue() = default;
  // Runs the tasks still queued (each is bounded by its own deadline), then joins the thread.
  ~TaskQueue();
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  // `task` must not throw (async collectives store their error in their Work).
  void push(std::function<void()> task);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dtrain::comm
